"""The edge's body gate against anonymous slow bodies: probes and authenticated clients stay served.

The probe run is real: the case app over in-memory adapters, with the process's own health
routes, served by uvicorn on a loopback port, and 300 raw sockets that each declare a
1000-byte ``POST /cases`` body without a token and send one byte of it. The budget tests
drive the pure ASGI middleware with ``httpx.ASGITransport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import BodyLimits, EdgeCounters, EdgePolicy, edge_app
from casestream.service.process import health_routes
from services.case.adapters.http.app import build_app as case_app
from services.case.adapters.memory import InMemoryStore
from tests.support.case_app import BODY, memory_case_service

VERIFIER = TokenVerifier(AuthSettings())
OFFICER = bearer_headers("tenant-a", subject="officer-1")
JSON = {"Content-Type": "application/json"}
SLOW_CLIENTS = 300


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False,
                                           lifespan="off", backlog=1024))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def slow_anonymous_bodies(port: int, n: int) -> list[socket.socket]:
    """``n`` connections, each sending ``POST /cases`` headers declaring 1000 bytes, no
    token, and the first byte of the body only."""
    head = (b"POST /cases HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{")
    conns = []
    for _ in range(n):
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn.sendall(head)
        conns.append(conn)
    return conns


def test_three_hundred_anonymous_slow_bodies_leave_probes_and_officers_served() -> None:
    app = case_app(memory_case_service(InMemoryStore()),
                   edge=EdgePolicy(verifier=VERIFIER, body=BodyLimits(read_timeout_s=8.0)))
    app.router.routes.extend(health_routes({}))
    with served(app) as base:
        port = int(base.rsplit(":", 1)[1])
        conns = slow_anonymous_bodies(port, SLOW_CLIENTS)
        try:
            counters: EdgeCounters = app.state.counters.edge
            # wait until every slow request has reached the edge: refused (401), or the
            # body gate is full (a gate of 256 sheds the other 44)
            deadline = time.monotonic() + 10
            while (counters.unauthorized < SLOW_CLIENTS and counters.shed < SLOW_CLIENTS - 256
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            with httpx.Client(base_url=base, timeout=5) as client:
                probes = []
                for _ in range(5):
                    probes.append(client.get("/healthz").status_code)
                    probes.append(client.get("/readyz").status_code)
                    time.sleep(0.1)
                opened = client.post("/cases", json=BODY, headers=OFFICER)
        finally:
            for conn in conns:
                conn.close()
    assert probes == [200] * 10
    assert opened.status_code == 201, opened.text
    # the anonymous bodies were never read: each was refused from its headers alone
    assert counters.unauthorized == SLOW_CLIENTS and counters.body_timeouts == 0


def _echo_app(limits: BodyLimits) -> Any:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"size": len(await request.body())})

    return edge_app([Route("/echo", echo, methods=["POST"]),
                     Route("/login", echo, methods=["POST"])],
                    EdgePolicy(verifier=VERIFIER,
                               public_paths=frozenset({"/healthz", "/login"}), body=limits))


def test_anonymous_bodies_hold_a_small_budget_per_client_and_in_total() -> None:
    async def scenario() -> tuple[list[int], list[int], list[int], list[int], int]:
        limits = BodyLimits(read_timeout_s=2.0, anonymous_pending=3, anonymous_per_client=2)
        app = _echo_app(limits)
        hold = asyncio.Event()

        async def trickle() -> AsyncIterator[bytes]:
            yield b"{"
            await hold.wait()
            yield b"}"

        def client(address: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 1)),
                                     base_url="http://svc", timeout=30)

        async with client("10.0.0.1") as one, client("10.0.0.2") as two, \
                client("10.0.0.3") as three:
            held = [asyncio.create_task(one.post("/login", content=trickle(), headers=JSON))
                    for _ in range(3)]
            await asyncio.sleep(0.05)
            # 10.0.0.1 holds its two; its third was refused at once
            done_first = [t for t in held if t.done()]
            held_two = asyncio.create_task(two.post("/login", content=trickle(), headers=JSON))
            await asyncio.sleep(0.05)  # the anonymous budget (3) is now full
            refused_three = await three.post("/login", json={"a": 1})
            officer = await three.post("/echo", json={"a": 1}, headers=OFFICER)
            hold.set()
            rest = await asyncio.gather(*held, held_two)
            after = await three.post("/login", json={"a": 1})
        return ([t.result().status_code for t in done_first], [r.status_code for r in rest],
                [refused_three.status_code, officer.status_code], [after.status_code],
                app.state.counters.shed)

    first, rest, mid, after, shed = asyncio.run(scenario())
    assert first == [503]  # the per-client cap, answered without waiting
    assert sorted(rest) == [200, 200, 200, 503]
    assert mid == [503, 200]  # anonymous total full; an authenticated body is still read
    assert after == [200]  # the budget is released when the bodies are in
    assert shed == 2


def test_a_body_without_a_valid_token_is_refused_before_it_is_read() -> None:
    async def scenario() -> tuple[httpx.Response, httpx.Response, bool]:
        app = _echo_app(BodyLimits(read_timeout_s=5.0))
        read = False

        async def never_sent() -> AsyncIterator[bytes]:
            nonlocal read
            read = True
            yield b"{}"

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://svc") as c:
            anonymous = await c.post("/echo", content=never_sent(), headers=JSON)
            forged = await c.post("/echo", json={}, headers={"Authorization": "Bearer x.y.z"})
        return anonymous, forged, read

    anonymous, forged, read = asyncio.run(scenario())
    assert anonymous.status_code == 401 and forged.status_code == 401
    assert anonymous.headers["connection"] == "close"  # the unread body ends the connection
    assert anonymous.json()["code"] == "unauthorized"
    assert not read


def test_a_token_is_verified_once_per_request_with_a_body() -> None:
    calls: list[str] = []

    class Counting(TokenVerifier):
        def verify(self, token: str) -> Any:
            calls.append(token)
            return super().verify(token)

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"size": len(await request.body())})

    app = edge_app([Route("/echo", echo, methods=["POST"])],
                   EdgePolicy(verifier=Counting(AuthSettings())))

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://svc") as c:
            return [(await c.post("/echo", json={"a": 1}, headers=OFFICER)).status_code,
                    (await c.post("/echo", headers=OFFICER)).status_code]

    assert asyncio.run(scenario()) == [200, 200]
    assert len(calls) == 2  # one per request: the gate's for the body, the middleware's without
