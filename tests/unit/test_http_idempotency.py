"""Unit tests of the Idempotency-Key component (casestream.http.idempotency).

The store contract (tests/support/idempotency_contract.py) on the in-memory store, and the
component mounted on a route of a starlette app behind the shared edge: key validation
(400 naming the header), replay marker, conflict and in-flight answers, metrics, and logs
that carry only the key's hash.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import (
    EdgePolicy,
    Idempotency,
    IdempotencyScope,
    InMemoryIdempotencyStore,
    StoredResponse,
    edge_app,
    json_body,
)
from casestream.telemetry.metrics import MetricsRegistry, render_prometheus
from casestream.telemetry.sources import Sources
from tests.support.idempotency_contract import CONTRACT, StepClock

H = bearer_headers("tenant-a", subject="user-1")


class MemoryBackend:
    def __init__(self) -> None:
        self.store = InMemoryIdempotencyStore()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.store.transaction() as tx:
            yield tx

    def count(self) -> int:
        return len(self.store.records)


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_store_contract_in_memory(body: Callable[[MemoryBackend], None]) -> None:
    body(MemoryBackend())


class ItemsApp:
    """A service with one idempotent write route: PUT /items/{item_id} stores the body."""

    def __init__(self, *, gate: threading.Event | None = None, fail_on: str | None = None) -> None:
        self.items: dict[str, Any] = {}
        self.store = InMemoryIdempotencyStore()
        self.clock = StepClock()
        self.idem = Idempotency(clock=self.clock)
        self.gate, self.fail_on = gate, fail_on
        self.entered = threading.Event()

    async def put(self, request: Request) -> Response:
        item_id = request.path_params["item_id"]
        data = await json_body(request)
        claim = self.idem.claim(request, "PUT /items/{item_id}", data)

        def work() -> tuple[StoredResponse, bool]:
            with self.store.transaction() as tx:
                stored = self.idem.begin(tx, claim)
                if stored is not None:
                    return stored, True
                self.entered.set()
                if self.gate is not None:
                    assert self.gate.wait(10)
                if data.get("name") == self.fail_on:
                    return self.idem.complete(tx, claim, StoredResponse(
                        status=422, body={"code": "refused"})), False
                self.items[item_id] = data
                return self.idem.complete(tx, claim, StoredResponse(
                    status=200, body={"id": item_id, **data}, headers={"ETag": '"1"'})), False

        return self.idem.respond(*await run_in_threadpool(work))

    def client(self) -> TestClient:
        app = edge_app([Route("/items/{item_id}", self.put, methods=["PUT"])],
                       EdgePolicy(verifier=TokenVerifier(AuthSettings())))
        self.idem.install(app)
        return TestClient(app, raise_server_exceptions=False)


def test_a_replay_is_the_stored_response_with_the_marker_and_counted() -> None:
    items = ItemsApp()
    client = items.client()
    key = {**H, "Idempotency-Key": "put-1"}
    first = client.put("/items/a", json={"name": "x"}, headers=key)
    again = client.put("/items/a", content=b'{ "name" : "x" }',
                       headers={**key, "Content-Type": "application/json"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() == {"id": "a", "name": "x"}
    assert again.headers["etag"] == '"1"' and again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    counters = client.app.state.counters  # type: ignore[attr-defined]
    assert counters is items.idem.counters and counters.idempotency_replays == 1
    assert counters.edge is not None and counters.edge.unauthorized == 0


def test_another_body_is_a_409_naming_the_header() -> None:
    client = ItemsApp().client()
    key = {**H, "Idempotency-Key": "put-2"}
    client.put("/items/a", json={"name": "x"}, headers=key)
    other = client.put("/items/a", json={"name": "y"}, headers=key)
    other_path = client.put("/items/b", json={"name": "x"}, headers=key)
    for answer in (other, other_path):
        assert answer.status_code == 409
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "idempotency_conflict"
        assert answer.json()["errors"][0]["field"] == "Idempotency-Key"
    assert client.app.state.counters.idempotency_conflicts == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["", " lead", "trail ", "x" * 256, "tab\there", "caf\x7f"])
def test_a_malformed_key_is_a_400_naming_the_header(value: str) -> None:
    client = ItemsApp().client()
    answer = client.put("/items/a", json={}, headers={**H, "Idempotency-Key": value})
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["errors"][0]["field"] == "Idempotency-Key"
    assert body["code"] == ("missing_idempotency_key" if value == "" else "validation_error")


def test_a_required_key_missing_is_a_400() -> None:
    answer = ItemsApp().client().put("/items/a", json={}, headers=H)
    assert answer.status_code == 400 and answer.json()["code"] == "missing_idempotency_key"
    assert "Idempotency-Key" in answer.json()["detail"]


def test_a_request_in_flight_gets_409_then_the_stored_response() -> None:
    gate = threading.Event()
    items = ItemsApp(gate=gate)
    client = items.client()
    key = {**H, "Idempotency-Key": "slow"}
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(
        client.put("/items/a", json={"name": "x"}, headers=key)))
    first.start()
    try:
        assert items.entered.wait(10)
        retry = client.put("/items/a", json={"name": "x"}, headers=key)
        assert retry.status_code == 409 and retry.json()["code"] == "request_in_flight"
        assert retry.headers["retry-after"] == "1"
    finally:
        gate.set()
        first.join(10)
    assert results and results[0].status_code == 200
    after = client.put("/items/a", json={"name": "x"}, headers=key)
    assert after.headers["idempotent-replayed"] == "true" and after.json() == results[0].json()
    assert items.idem.counters.idempotency_in_flight == 1


def test_a_refused_request_leaves_the_key_free_for_a_good_retry() -> None:
    items = ItemsApp(fail_on="bad")
    client = items.client()
    key = {**H, "Idempotency-Key": "retry-me"}
    refused = client.put("/items/a", json={"name": "bad"}, headers=key)
    good = client.put("/items/a", json={"name": "good"}, headers=key)
    assert refused.status_code == 422 and good.status_code == 200
    assert "idempotent-replayed" not in good.headers and items.items == {"a": {"name": "good"}}


def test_keys_are_scoped_by_the_principal() -> None:
    items = ItemsApp()
    client = items.client()
    for headers in (H, bearer_headers("tenant-b", subject="user-1"),
                    bearer_headers("tenant-a", subject="user-2"),
                    bearer_headers("tenant-a", subject="user-1", client_id="mobile")):
        answer = client.put("/items/a", json={"name": "x"}, headers={**headers, "Idempotency-Key": "same"})
        assert answer.status_code == 200 and "idempotent-replayed" not in answer.headers
    scopes = {(s.tenant_id, s.subject, s.client_id, s.route) for s in items.store.records}
    assert scopes == {("tenant-a", "user-1", "user-1", "PUT /items/{item_id}"),
                      ("tenant-b", "user-1", "user-1", "PUT /items/{item_id}"),
                      ("tenant-a", "user-2", "user-2", "PUT /items/{item_id}"),
                      ("tenant-a", "user-1", "mobile", "PUT /items/{item_id}")}


def test_logs_carry_the_hashed_key_only(caplog: pytest.LogCaptureFixture) -> None:
    client = ItemsApp().client()
    raw = "secret-key-0042"
    with caplog.at_level(logging.DEBUG):
        for name in ("x", "x", "y"):
            client.put("/items/a", json={"name": name}, headers={**H, "Idempotency-Key": raw})
    assert raw not in caplog.text
    assert hashlib.sha256(raw.encode()).hexdigest()[:16] in caplog.text


def test_the_counters_reach_the_metrics() -> None:
    items = ItemsApp()
    client = items.client()
    key = {**H, "Idempotency-Key": "m"}
    for name in ("x", "x", "y"):
        client.put("/items/a", json={"name": name}, headers=key)
    sources = Sources()
    sources.add_counters("http", client.app.state.counters)  # type: ignore[attr-defined]
    registry = MetricsRegistry("unit", sources)
    try:
        lines = render_prometheus(registry.collect()).splitlines()
    finally:
        registry.shutdown()
    assert "idempotency_replays_total 1.0" in lines
    assert "idempotency_conflicts_total 1.0" in lines
    assert "http_unauthorized_total 0.0" in lines


def test_a_scope_needs_a_principal_and_a_positive_ttl() -> None:
    with pytest.raises(ValueError, match="subject or a client_id"):
        IdempotencyScope.of(tenant_id="t", route="r", raw_key="k")
    scope = IdempotencyScope.of(tenant_id="t", route="r", raw_key="k", client_id="c")
    assert (scope.subject, scope.client_id) == ("c", "c")
    assert re.fullmatch("[0-9a-f]{64}", scope.key_hash)
    with pytest.raises(ValueError, match="ttl"):
        from datetime import timedelta
        Idempotency(ttl=timedelta(0))
