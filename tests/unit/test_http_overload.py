"""Load shedding, rate limiting and request deadlines of the shared HTTP edge (pure ASGI).

Apps are driven with ``httpx.AsyncClient`` over ``ASGITransport`` so requests really run
concurrently on one event loop, as under uvicorn.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import (
    EdgeCounters,
    EdgePolicy,
    RateLimit,
    RateLimiter,
    current_deadline,
    deadline_scope,
    edge_middleware,
)
from casestream.http.pgdeadline import Watchdog
from casestream.http.ratelimit import retry_after_seconds

VERIFIER = TokenVerifier(AuthSettings())
A1 = bearer_headers("tenant-a", subject="a1")
A2 = bearer_headers("tenant-a", subject="a2")
B1 = bearer_headers("tenant-b", subject="b1")


def blocking_app(policy: EdgePolicy, release: asyncio.Event,
                 counters: EdgeCounters) -> Starlette:
    async def slow(_: Request) -> JSONResponse:
        await release.wait()
        return JSONResponse({"ok": True})

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "alive"})

    return Starlette(routes=[Route("/slow", slow), Route("/healthz", healthz)],
                     middleware=edge_middleware(policy, counters))


class TestLoadShedding:
    def test_burst_beyond_the_limit_is_503_at_once(self) -> None:
        async def scenario() -> tuple[list[httpx.Response], float, list[httpx.Response],
                                      EdgeCounters]:
            release, counters = asyncio.Event(), EdgeCounters()
            app = blocking_app(EdgePolicy(verifier=VERIFIER, max_in_flight=3), release, counters)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://case") as client:
                held = [asyncio.create_task(client.get("/slow", headers=A1)) for _ in range(3)]
                await asyncio.sleep(0.05)  # the three are now in flight, blocked
                started = time.monotonic()
                burst = await asyncio.gather(*(client.get("/slow", headers=A1)
                                               for _ in range(7)))
                elapsed = time.monotonic() - started
                probe = await client.get("/healthz")  # probes are never shed
                release.set()
                done = await asyncio.gather(*held)
                after = await client.get("/slow", headers=A1)  # capacity is back
            return burst, elapsed, [*done, probe, after], counters

        burst, elapsed, served, counters = asyncio.run(scenario())
        assert [r.status_code for r in burst] == [503] * 7
        assert elapsed < 1.0  # refused immediately, not queued until a timeout
        for response in burst:
            assert response.headers["retry-after"] == "1"
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == "overloaded"
        assert [r.status_code for r in served] == [200] * 5
        assert counters.shed == 7

    def test_shedding_counts_unauthenticated_requests_too(self) -> None:
        async def scenario() -> list[int]:
            release = asyncio.Event()
            app = blocking_app(EdgePolicy(verifier=VERIFIER, max_in_flight=1), release,
                               EdgeCounters())
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://case") as client:
                held = asyncio.create_task(client.get("/slow", headers=A1))
                await asyncio.sleep(0.05)
                refused = await client.get("/slow")  # no token: shed before auth work
                release.set()
                return [refused.status_code, (await held).status_code]

        assert asyncio.run(scenario()) == [503, 200]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestTokenBuckets:
    def test_burst_then_refill(self) -> None:
        clock = FakeClock()
        limiter = RateLimiter(per_tenant=None, per_client=RateLimit(rate_per_s=2, burst=3),
                              clock=clock)
        assert [limiter.acquire("t", "c") for _ in range(3)] == [None] * 3
        refused = limiter.acquire("t", "c")
        assert refused is not None and refused[0] == "client"
        assert refused[1] == pytest.approx(0.5)  # one token per 0.5 s
        clock.now += 0.5
        assert limiter.acquire("t", "c") is None
        assert limiter.acquire("t", "c") is not None
        clock.now += 60  # refills to the burst, never beyond
        assert [limiter.acquire("t", "c") for _ in range(4)].count(None) == 3

    def test_tenant_limit_spans_its_clients_and_not_other_tenants(self) -> None:
        clock = FakeClock()
        limiter = RateLimiter(per_tenant=RateLimit(rate_per_s=1, burst=2),
                              per_client=RateLimit(rate_per_s=100, burst=100), clock=clock)
        assert limiter.acquire("t", "c1") is None
        assert limiter.acquire("t", "c2") is None
        refused = limiter.acquire("t", "c3")
        assert refused is not None and refused[0] == "tenant" and refused[1] == pytest.approx(1)
        assert limiter.acquire("other", "c1") is None

    def test_a_refusal_takes_no_token(self) -> None:
        clock = FakeClock()
        limiter = RateLimiter(per_tenant=RateLimit(rate_per_s=1, burst=5),
                              per_client=RateLimit(rate_per_s=1, burst=1), clock=clock)
        assert limiter.acquire("t", "greedy") is None
        for _ in range(10):
            assert limiter.acquire("t", "greedy") is not None
        # the tenant bucket lost only the one served request
        assert [limiter.acquire("t", f"c{i}") for i in range(4)] == [None] * 4

    def test_idle_buckets_are_evicted_beyond_max_keys(self) -> None:
        limiter = RateLimiter(per_tenant=None, per_client=RateLimit(rate_per_s=1, burst=1),
                              clock=FakeClock(), max_keys=10)
        for i in range(50):
            limiter.acquire("t", f"c{i}")
        assert len(limiter._buckets) == 10  # noqa: SLF001 - the bound is the point

    def test_retry_after_rounds_up(self) -> None:
        assert [retry_after_seconds(w) for w in (0.01, 0.5, 1.0, 1.2, 7.9)] == [1, 1, 1, 2, 8]

    def test_invalid_limits(self) -> None:
        with pytest.raises(ValueError):
            RateLimit(rate_per_s=0, burst=1)
        with pytest.raises(ValueError):
            RateLimit(rate_per_s=1, burst=0)


class TestRateLimitAnswer:
    def test_429_with_retry_after_per_client_and_per_tenant(self) -> None:
        async def ok(_: Request) -> JSONResponse:
            return JSONResponse({"ok": True})

        counters = EdgeCounters()
        policy = EdgePolicy(verifier=VERIFIER, per_tenant=RateLimit(rate_per_s=0.1, burst=3),
                            per_client=RateLimit(rate_per_s=0.5, burst=2))
        app = Starlette(routes=[Route("/ok", ok)], middleware=edge_middleware(policy, counters))

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://case") as client:
                return [await client.get("/ok", headers=h) for h in (A1, A1, A1, A2, A2, B1)]

        a1, a1_again, a1_limited, a2, a2_limited, b1 = asyncio.run(scenario())
        assert [r.status_code for r in (a1, a1_again, a2, b1)] == [200] * 4
        body = a1_limited.json()
        assert a1_limited.status_code == 429
        assert a1_limited.headers["content-type"] == "application/problem+json"
        assert a1_limited.headers["retry-after"] == "2"  # client bucket: 0.5 token/s
        assert body["retry_after_seconds"] == 2 and body["limit_scope"] == "client"
        assert body["code"] == "rate_limited"
        # tenant-a has used its 3 tokens (a1, a1, a2): a2 waits for the tenant (10 s)
        assert a2_limited.status_code == 429 and a2_limited.headers["retry-after"] == "10"
        assert a2_limited.json()["limit_scope"] == "tenant"
        assert counters.rate_limited == 2

    def test_unauthenticated_requests_are_not_rate_limited_but_401(self) -> None:
        async def ok(_: Request) -> JSONResponse:
            return JSONResponse({"ok": True})

        policy = EdgePolicy(verifier=VERIFIER, per_client=RateLimit(rate_per_s=0.1, burst=1))
        app = Starlette(routes=[Route("/ok", ok)], middleware=edge_middleware(policy))

        async def scenario() -> list[int]:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://case") as client:
                return [(await client.get("/ok")).status_code for _ in range(3)]

        assert asyncio.run(scenario()) == [401, 401, 401]


class TestDeadlines:
    def test_a_nested_scope_never_extends_the_deadline(self) -> None:
        assert current_deadline() is None
        with deadline_scope(1.0) as outer:
            with deadline_scope(30.0) as inner:
                assert inner == outer and current_deadline() == outer
            with deadline_scope(0.2) as shorter:
                assert shorter.at < outer.at
            assert current_deadline() == outer
        assert current_deadline() is None

    def test_the_request_deadline_reaches_the_thread_pool(self) -> None:
        seen: list[Any] = []

        async def endpoint(_: Request) -> JSONResponse:
            def in_thread() -> float | None:
                deadline = current_deadline()
                return None if deadline is None else deadline.remaining()

            seen.append(await run_in_threadpool(in_thread))
            return JSONResponse({})

        policy = EdgePolicy(verifier=VERIFIER, deadline_s=2.5)
        app = Starlette(routes=[Route("/x", endpoint)], middleware=edge_middleware(policy))

        async def scenario() -> int:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://case") as client:
                return (await client.get("/x", headers=A1)).status_code

        assert asyncio.run(scenario()) == 200
        assert seen and seen[0] is not None and 2.0 < seen[0] <= 2.5

    def test_watchdog_fires_at_the_deadline_unless_disarmed(self) -> None:
        watchdog, fired = Watchdog(name="test-watchdog"), threading.Event()
        started = time.monotonic()
        with watchdog.armed(started + 0.2, fired.set):
            assert fired.wait(2)
        assert 0.15 < time.monotonic() - started < 1.5
        late = threading.Event()
        with watchdog.armed(time.monotonic() + 0.2, late.set):
            pass  # left before the deadline
        assert not late.wait(0.5)
