"""The shared HTTP edge against hostile clients, through the services' own apps (pure ASGI).

Each finding of a hostile-client run is reproduced here: deeply nested, oversized,
mistyped, duplicate-key and invalid-Unicode bodies; NUL in a query parameter; slow bodies
holding in-flight slots; disconnects logged as errors; 500s as text; one metric series per
made-up method; identifier claims with a trailing newline; unredacted log context.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from casestream import telemetry
from casestream.auth.tokens import AuthSettings, InvalidToken, TokenVerifier, bearer_headers
from casestream.auth.tokens import principal_from_claims
from casestream.http import BodyLimits, EdgeCounters, EdgePolicy, edge_app, parse_json
from casestream.http import HttpProblem
from casestream.telemetry.http import TracingMiddleware
from casestream.telemetry.logs import JsonFormatter, log_context
from casestream.telemetry.settings import TelemetrySettings
from services.case.adapters.http.app import build_app as case_app
from services.case.adapters.memory import InMemoryStore
from tests.support.case_app import BODY, memory_case_service
from tests.unit.problems import problem
from tests.unit.test_saga_http import SUPERVISOR, Setup

VERIFIER = TokenVerifier(AuthSettings())
OFFICER = bearer_headers("tenant-a", subject="officer-1")
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def saga() -> Setup:
    return Setup()


def resolve(setup: Setup, content: bytes, headers: dict[str, str] | None = None) -> Any:
    return setup.client.post(f"/sagas/{setup.saga_id}/resolve", content=content,
                             headers={**SUPERVISOR, **JSON, **(headers or {})})


class TestSagaResolveBody:
    def test_deeply_nested_json_is_400_naming_the_depth(self, saga: Setup) -> None:
        body = problem(resolve(saga, b"[" * 10_000 + b"]" * 10_000), 400, "json_too_deep")
        assert "32" in body["detail"]
        nested = json.dumps({"reason": "x", "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})
        body = problem(resolve(saga, nested.encode()), 400, "json_too_deep")
        assert body["errors"][0]["field"].startswith("a.0.0")

    def test_a_body_over_the_limit_is_413_and_never_read_whole(self, saga: Setup) -> None:
        problem(resolve(saga, b'{"reason": "' + b"x" * (10 * 1024 * 1024) + b'"}'), 413,
                "payload_too_large")

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: streamed
            for _ in range(100):
                yield b"x" * 4096

        async def streamed() -> httpx.Response:
            transport = httpx.ASGITransport(app=saga.client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://saga") as c:
                return await c.post(f"/sagas/{saga.saga_id}/resolve", content=chunks(),
                                    headers={**SUPERVISOR, **JSON})

        problem(asyncio.run(streamed()), 413, "payload_too_large")

    @pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", ""])
    def test_a_body_that_is_not_json_is_415(self, saga: Setup, ctype: str) -> None:
        r = saga.client.post(f"/sagas/{saga.saga_id}/resolve", content=b'{"reason": "x"}',
                             headers={**SUPERVISOR, "Content-Type": ctype})
        problem(r, 415, "unsupported_media_type")

    @pytest.mark.parametrize("escaped, named", [(r"\u0000", "U+0000"), (r"\ud800", "U+D800"),
                                                (r"\udfff", "U+DFFF")])
    def test_nul_and_lone_surrogates_are_400_naming_the_field(self, saga: Setup, escaped: str,
                                                              named: str) -> None:
        r = resolve(saga, ('{"reason": "ok ' + escaped + '"}').encode())
        body = problem(r, 400, "invalid_unicode")
        assert body["errors"][0]["field"] == "reason" and named in body["detail"]

    def test_invalid_utf8_is_malformed_json(self, saga: Setup) -> None:
        body = problem(resolve(saga, b'{"reason": "\xff"}'), 400, "malformed_json")
        assert "UTF-8" in body["detail"]

    def test_a_reason_that_could_not_be_published_is_refused(self, saga: Setup) -> None:
        body = problem(resolve(saga, json.dumps({"reason": "r" * 5000}).encode()), 400,
                       "validation_error")
        assert body["errors"][0]["field"] == "reason"
        for bad in ["   ", "line\x07bell", 7]:
            body = problem(resolve(saga, json.dumps({"reason": bad}).encode()), 400,
                           "validation_error")
            assert body["errors"][0]["field"] == "reason"
        body = problem(resolve(saga, json.dumps({"reason": "x", "extra": 1}).encode()), 400,
                       "validation_error")
        assert body["errors"][0] == {"field": "extra", "message": "unknown field"}

    def test_nul_in_a_query_parameter_is_400(self, saga: Setup) -> None:
        for query in ["case_id=%00", "state=%00", "case_id=a%0A", "limit=%00"]:
            body = problem(saga.client.get(f"/sagas?{query}", headers=SUPERVISOR), 400,
                           "validation_error")
            assert body["errors"][0]["field"] == query.split("=")[0], query


class TestStrictJson:
    def test_duplicate_keys_are_refused_everywhere(self) -> None:
        client = TestClient(case_app(memory_case_service(InMemoryStore()),
                                     edge=EdgePolicy(verifier=VERIFIER)),
                            raise_server_exceptions=False)
        raw = json.dumps(BODY)[:-1] + ', "severity": 1}'
        body = problem(client.post("/cases", content=raw.encode(), headers={**OFFICER, **JSON}),
                       400, "duplicate_json_key")
        assert '"severity"' in body["detail"]
        with pytest.raises(HttpProblem, match="duplicate"):
            parse_json(b'{"a": {"b": 1, "b": 2}}')

    def test_what_json_loads_accepts_and_a_service_must_not(self) -> None:
        for raw, code in [(b'{"a": NaN}', "malformed_json"), (b'{"a": 1e999}', "malformed_json"),
                          (b'{"a": ' + b"9" * 5000 + b"}", "malformed_json"),
                          (b'{"k\\u0000": 1}', "invalid_unicode")]:
            with pytest.raises(HttpProblem) as e:
                parse_json(raw)
            assert e.value.code == code and e.value.status == 400, raw[:30]
        assert parse_json('{"a": ["é", 1.5, null]}'.encode()) == {"a": ["é", 1.5, None]}


def _slow_app(limits: BodyLimits, counters: EdgeCounters) -> Any:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"size": len(await request.body())})

    return edge_app([Route("/echo", echo, methods=["POST"])],
                    EdgePolicy(verifier=VERIFIER, max_in_flight=32, body=limits))


class TestSlowBodies:
    def test_forty_slow_bodies_do_not_starve_normal_clients(self) -> None:
        async def scenario() -> tuple[list[int], list[int], EdgeCounters]:
            limits = BodyLimits(read_timeout_s=0.5)
            app = _slow_app(limits, EdgeCounters())
            hold = asyncio.Event()

            async def trickle() -> AsyncIterator[bytes]:
                yield b"{"
                await hold.wait()  # never sends the rest: the edge's read timeout ends it
                yield b"}"

            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://svc",
                                         timeout=30) as c:
                slow = [asyncio.create_task(c.post("/echo", content=trickle(),
                                                   headers={**OFFICER, **JSON}))
                        for _ in range(40)]
                await asyncio.sleep(0.05)  # all forty are now sending their bodies
                normal = [await c.post("/echo", json={"n": i}, headers=OFFICER)
                          for i in range(50)]
                slow_done = await asyncio.gather(*slow)
                hold.set()
            return ([r.status_code for r in normal], [r.status_code for r in slow_done],
                    app.state.counters)

        normal, slow, counters = asyncio.run(scenario())
        assert normal == [200] * 50
        assert slow == [408] * 40
        assert counters.body_timeouts == 40 and counters.shed == 0

    def test_a_client_gone_while_sending_is_no_error(self, caplog: pytest.LogCaptureFixture) -> None:
        async def scenario() -> list[dict[str, Any]]:
            app = _slow_app(BodyLimits(), EdgeCounters())
            messages = [{"type": "http.request", "body": b"{", "more_body": True},
                        {"type": "http.disconnect"}]
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return messages.pop(0) if messages else {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                     "method": "POST", "scheme": "http", "path": "/echo", "raw_path": b"/echo",
                     "query_string": b"", "root_path": "",
                     "headers": [(b"content-type", b"application/json"),
                                 (b"transfer-encoding", b"chunked"),
                                 *[(k.lower().encode(), v.encode()) for k, v in OFFICER.items()]],
                     "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
            await app(scope, receive, send)
            assert app.state.counters.client_disconnects == 1
            return sent

        with caplog.at_level(logging.DEBUG):
            assert asyncio.run(scenario()) == []  # nothing answered to a client that is gone
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


class TestErrorsAreProblems:
    def test_an_unhandled_error_is_a_500_problem_logged_once(
            self, caplog: pytest.LogCaptureFixture) -> None:
        async def broken(_: Request) -> JSONResponse:
            raise RuntimeError("bug")

        app = edge_app([Route("/broken", broken)], EdgePolicy(verifier=VERIFIER))
        with caplog.at_level(logging.ERROR):
            r = TestClient(app, raise_server_exceptions=False).get("/broken", headers=OFFICER)
        body = problem(r, 500, "internal_error")
        assert "bug" not in r.text and "Traceback" not in r.text and body["instance"] == "/broken"
        assert [rec.getMessage() for rec in caplog.records] == ["unhandled error on GET /broken"]

    def test_unknown_paths_and_methods_are_problems(self, saga: Setup) -> None:
        problem(saga.client.get("/nope", headers=SUPERVISOR), 404, "not_found")
        r = saga.client.delete(f"/sagas/{saga.saga_id}", headers=SUPERVISOR)
        problem(r, 405, "method_not_allowed")
        assert "GET" in r.headers["allow"]


@pytest.fixture()
def fresh_telemetry() -> None:
    telemetry.install("unit", TelemetrySettings(OTEL_TRACES_EXPORTER="none"))


def test_made_up_methods_and_paths_add_no_metric_series(fresh_telemetry: None) -> None:
    async def known(_: Request) -> JSONResponse:
        return JSONResponse({})

    app = TracingMiddleware(Starlette(routes=[Route("/known/{id}", known)]), serve_metrics=True)

    async def scenario() -> tuple[str, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as c:
            await c.request("M9999", "/warm/up")  # the two series exist from here on
            await c.get("/warm/up")
            before = (await c.get("/metrics")).text
            for i in range(1000):
                await c.request(f"M{i:04d}", f"/p{i}/x")  # made-up method and path
                await c.get(f"/random/{i}")  # unknown path
            return before, (await c.get("/metrics")).text

    before, exposition = asyncio.run(scenario())
    series = {line.split(" ")[0] for line in exposition.splitlines()
              if line.startswith("http_server_duration_seconds_count")}
    methods = {re.search(r'method="([^"]*)"', s)[1] for s in series}  # type: ignore[index]
    assert methods == {"GET", "_OTHER"} and len(series) <= 4, series
    # other tests' metrics share the process's registry: the growth is what 2,000 requests added
    assert len(exposition) - len(before) < 4 * 1024, len(exposition) - len(before)


@pytest.mark.parametrize("claim", ["sub", "tenant", "client_id"])
@pytest.mark.parametrize("suffix", ["\n", "\r", "\x00", "\t"])
def test_identifier_claims_are_matched_in_full(claim: str, suffix: str) -> None:
    claims = {"sub": "officer-1", "tenant": "A", "roles": ["officer"], "client_id": "app"}
    assert principal_from_claims(claims).tenant_id == "A"
    with pytest.raises(InvalidToken, match=claim):
        principal_from_claims({**claims, claim: claims[claim] + suffix})


def test_log_context_fields_are_redacted() -> None:
    logger = logging.getLogger("unit.redaction")
    with log_context(aggregate_id="jane.doe@example.org", consumer="c"):
        record = logger.makeRecord("unit.redaction", logging.WARNING, __file__, 1, "failed", (),
                                   None, extra={"failure_class": "x john@example.com"})
        line = JsonFormatter("svc").format(record)
    assert "example.org" not in line and "example.com" not in line
    assert json.loads(line)["aggregate_id"] == "<email>"


def test_405_allows_every_method_of_routes_sharing_a_path() -> None:
    async def ok(_: Request) -> JSONResponse:
        return JSONResponse({})

    app = edge_app([Route("/w/{id}", ok, methods=["GET"]), Route("/w/{id}", ok, methods=["PUT"])],
                   EdgePolicy(verifier=VERIFIER))
    r = TestClient(app, raise_server_exceptions=False).options("/w/1", headers=OFFICER)
    problem(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, HEAD, PUT"


def test_an_apps_bare_edge_counters_are_exported() -> None:
    from casestream.telemetry.metrics import MetricsRegistry, render_prometheus
    from casestream.telemetry.sources import Sources

    sources = Sources()
    sources.add_counters("saga", EdgeCounters(shed=2, body_timeouts=3, client_disconnects=4))
    registry = MetricsRegistry("unit", sources)
    try:
        lines = render_prometheus(registry.collect()).splitlines()
    finally:
        registry.shutdown()
    for sample in ("http_shed_total 2.0", "http_body_timeouts_total 3.0",
                   "http_client_disconnects_total 4.0", "http_internal_errors_total 0.0"):
        assert sample in lines
