"""The saga HTTP API over the in-memory store (starlette TestClient), behind the shared edge.

Covers the routes' behaviour and the edge rules for them: 401 without / with a bad token,
403 for an officer resolving (and for a token without a reading role), the same 404 for
another tenant's saga on every route (before any state check on resolve), lists and
gauges scoped to the caller's tenant, and the actor of a resolve taken from ``sub``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.events.envelope import new_event
from casestream.http import EdgePolicy
from services.saga.adapters.http import build_app
from casestream.testing import MemorySink
from services.saga.adapters.memory import MemorySagaStore
from services.saga.application.orchestrator import Orchestrator
from services.saga.domain import case_review as cr
from services.saga.domain import case_review_saga
from tests.unit.problems import problem

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CASE = "case-1"
OTHER_CASE = "case-2"
EDGE = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
OFFICER = bearer_headers("t", subject="officer-1")
SUPERVISOR = bearer_headers("t", ("supervisor",), subject="op-7")
OTHER_OFFICER = bearer_headers("t2", subject="officer-2")
OTHER_SUPERVISOR = bearer_headers("t2", ("supervisor",), subject="op-9")
NO_ROLE = bearer_headers("t", (), subject="nobody")
OPERATOR = bearer_headers("t", ("operator",), subject="ops-1")
OPERATOR_SUPERVISOR = bearer_headers("t", ("operator", "supervisor"), subject="ops-2")
UNKNOWN = "00000000-0000-4000-8000-000000000000"


def start(orch: Orchestrator, store: MemorySagaStore, sink: MemorySink, case_id: str,
          tenant: str) -> str:
    event = new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=case_id,
                      aggregate_version=2, tenant_id=tenant, source="case", actor_id="a",
                      correlation_id=case_id,
                      payload={"title": "T", "severity": 4, "evidence_count": 1,
                               "reporter_email": "r@example.org", "submitted_by": "a"})
    return orch.handle(store, sink, event).saga_id or ""


def park(orch: Orchestrator, store: MemorySagaStore, sink: MemorySink, case_id: str,
         saga_id: str, tenant: str) -> None:
    """Drive the saga to MANUAL_REVIEW (violation, then the notice fails)."""
    for event_type, payload in [("ViolationDetermined", {"violation_code": "REG-4",
                                                         "penalty_cents": 200_000}),
                                ("NoticeFailed", {"reason": "bounced"})]:
        orch.handle(store, sink, new_event(
            event_type=event_type, aggregate_type="x", aggregate_id=case_id,
            aggregate_version=1, tenant_id=tenant, source="x", actor_id="a",
            correlation_id=case_id, payload={"case_id": case_id, "saga_id": saga_id, **payload}))
    assert store.get(saga_id).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]


class Setup:
    def __init__(self) -> None:
        self.now = T0
        self.store, self.sink = MemorySagaStore(), MemorySink()
        self.orch = Orchestrator(case_review_saga(), clock=lambda: T0)
        self.saga_id = start(self.orch, self.store, self.sink, CASE, "t")
        self.other_id = start(self.orch, self.store, self.sink, OTHER_CASE, "t2")

        def resolver(sid: str, *, reason: str, actor_id: str, tenant_id: str) -> Any:
            return self.orch.resolve(self.store, self.sink, sid, reason=reason,
                                     actor_id=actor_id, tenant_id=tenant_id)

        self.client = TestClient(build_app(self.store, self.orch, resolver, edge=EDGE,
                                           stuck_grace=timedelta(seconds=60),
                                           clock=lambda: self.now),
                                 raise_server_exceptions=False)


@pytest.fixture
def setup() -> Setup:
    return Setup()


def test_get_saga_shows_state_deadline_and_history(setup: Setup) -> None:
    r = setup.client.get(f"/sagas/{setup.saga_id}", headers=OFFICER)
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == cr.AWAITING_DECISION and body["state_kind"] == "active"
    assert body["tenant_id"] == "t"
    assert body["deadline"]["step"] == "decide" and body["deadline"]["max_attempts"] == 1
    assert body["deadline"]["at"].startswith("2025-01-01T12:05")
    assert [h["trigger"] for h in body["history"]] == ["CaseSubmitted"]
    assert setup.client.get(f"/sagas/{setup.saga_id}", headers=SUPERVISOR).status_code == 200


def test_unknown_and_malformed_ids(setup: Setup) -> None:
    problem(setup.client.get(f"/sagas/{UNKNOWN}", headers=OFFICER), 404, "saga_not_found")
    body = problem(setup.client.get("/sagas/not-a-uuid", headers=OFFICER), 400,
                   "invalid_saga_id")
    assert body["field"] == "saga_id"


def test_list_filters_by_state_and_validates_input(setup: Setup) -> None:
    c = setup.client
    assert [s["saga_id"] for s in c.get("/sagas?state=AWAITING_DECISION",
                                         headers=OFFICER).json()["items"]] == [setup.saga_id]
    assert c.get("/sagas?state=COMPLETED", headers=OFFICER).json()["count"] == 0
    problem(c.get("/sagas?state=NOPE", headers=OFFICER), 400, "validation_error")
    body = problem(c.get("/sagas?limit=0", headers=OFFICER), 400, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["limit"]
    assert c.get(f"/sagas?case_id={CASE}", headers=OFFICER).json()["count"] == 1


def test_resolve_needs_a_reason_and_a_parked_saga(setup: Setup) -> None:
    c, saga_id = setup.client, setup.saga_id
    body = problem(c.post(f"/sagas/{saga_id}/resolve", json={}, headers=SUPERVISOR), 400,
                   "validation_error")
    assert body["errors"] == [{"field": "reason", "message": "field required"}]
    problem(c.post(f"/sagas/{saga_id}/resolve", content=b"{",
                   headers={**SUPERVISOR, "Content-Type": "application/json"}), 400,
            "malformed_json")
    body = problem(c.post(f"/sagas/{saga_id}/resolve", json={"reason": "x"},
                          headers=SUPERVISOR), 409, "saga_not_resolvable")
    assert body["state"] == cr.AWAITING_DECISION
    problem(c.post(f"/sagas/{UNKNOWN}/resolve", json={"reason": "x"}, headers=SUPERVISOR),
            404, "saga_not_found")


def test_supervisor_resolves_manual_review_as_the_token_subject(setup: Setup) -> None:
    park(setup.orch, setup.store, setup.sink, CASE, setup.saga_id, "t")
    r = setup.client.post(f"/sagas/{setup.saga_id}/resolve", json={"reason": "sent by post"},
                          headers={**SUPERVISOR, "X-Actor-Id": "spoofed"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == cr.AWAITING_CLOSE
    resolved = [e for e in setup.sink.events if e.event_type == "SagaResolved"]
    assert [e.actor_id for e in resolved] == ["op-7"]  # from the token, never a header
    assert setup.sink.events[-1].actor_id == "op-7"


def test_officer_cannot_resolve(setup: Setup) -> None:
    park(setup.orch, setup.store, setup.sink, CASE, setup.saga_id, "t")
    r = setup.client.post(f"/sagas/{setup.saga_id}/resolve", json={"reason": "x"},
                          headers=OFFICER)
    problem(r, 403, "forbidden")
    assert "insufficient_scope" in r.headers["www-authenticate"]
    assert setup.store.get(setup.saga_id).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/sagas"), ("GET", "/sagas?state=AWAITING_DECISION"), ("GET", "/sagas/stuck"),
    ("GET", "/sagas/metrics"), ("GET", f"/sagas/{UNKNOWN}"),
    ("POST", f"/sagas/{UNKNOWN}/resolve")])
def test_every_route_needs_a_token(setup: Setup, method: str, path: str) -> None:
    r = setup.client.request(method, path, json={"reason": "x"})
    problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    r = setup.client.request(method, path, json={"reason": "x"},
                             headers={"Authorization": "Bearer not.a.token"})
    problem(r, 401, "invalid_token")
    problem(setup.client.request(method, path, json={"reason": "x"}, headers=NO_ROLE),
            403, "forbidden")


def test_another_tenants_saga_is_not_found_on_every_route(setup: Setup) -> None:
    c, mine, theirs = setup.client, setup.saga_id, setup.other_id
    # GET by id: the same 404 as an unknown id
    unknown = problem(c.get(f"/sagas/{UNKNOWN}", headers=OFFICER), 404, "saga_not_found")
    other = problem(c.get(f"/sagas/{theirs}", headers=OFFICER), 404, "saga_not_found")
    assert other["title"] == unknown["title"]
    assert c.get(f"/sagas/{theirs}", headers=OTHER_OFFICER).status_code == 200
    # lists: only the caller's sagas, also when asking for the other tenant's case
    assert [s["saga_id"] for s in c.get("/sagas", headers=OFFICER).json()["items"]] == [mine]
    assert [s["saga_id"] for s in c.get("/sagas", headers=OTHER_OFFICER).json()["items"]] \
        == [theirs]
    assert c.get(f"/sagas?case_id={OTHER_CASE}", headers=OFFICER).json()["count"] == 0
    # resolve: 404 before any state check (a 409 would reveal the saga exists) ...
    problem(c.post(f"/sagas/{theirs}/resolve", json={"reason": "x"}, headers=SUPERVISOR),
            404, "saga_not_found")
    # ... also when the other tenant's saga is resolvable, and nothing changes
    park(setup.orch, setup.store, setup.sink, OTHER_CASE, theirs, "t2")
    problem(c.post(f"/sagas/{theirs}/resolve", json={"reason": "x"}, headers=SUPERVISOR),
            404, "saga_not_found")
    assert setup.store.get(theirs).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]
    assert c.post(f"/sagas/{theirs}/resolve", json={"reason": "ok"},
                  headers=OTHER_SUPERVISOR).status_code == 200


def test_an_operator_reads_every_tenant_but_resolves_only_its_own(setup: Setup) -> None:
    c, mine, theirs = setup.client, setup.saga_id, setup.other_id
    assert c.get(f"/sagas/{theirs}", headers=OPERATOR).json()["tenant_id"] == "t2"
    assert {s["saga_id"] for s in c.get("/sagas", headers=OPERATOR).json()["items"]} \
        == {mine, theirs}
    assert c.get(f"/sagas?case_id={OTHER_CASE}", headers=OPERATOR).json()["count"] == 1
    gauges = c.get("/sagas/metrics", headers=OPERATOR).json()["gauges"]
    assert gauges["sagas{state=AWAITING_DECISION}"] == 2
    park(setup.orch, setup.store, setup.sink, OTHER_CASE, theirs, "t2")
    problem(c.post(f"/sagas/{theirs}/resolve", json={"reason": "x"},
                   headers=OPERATOR_SUPERVISOR), 404, "saga_not_found")
    assert setup.store.get(theirs).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]


def test_stuck_and_metrics_are_scoped_to_the_tenant(setup: Setup) -> None:
    c = setup.client
    deadline = setup.store.get(setup.saga_id).deadline_at  # type: ignore[union-attr]
    assert deadline is not None
    setup.now = deadline + timedelta(seconds=61)
    for headers, own in ((OFFICER, setup.saga_id), (OTHER_OFFICER, setup.other_id)):
        body = c.get("/sagas/stuck", headers=headers).json()
        assert [s["saga_id"] for s in body["items"]] == [own]
        gauges = c.get("/sagas/metrics", headers=headers).json()["gauges"]
        assert gauges["sagas_stuck"] == 1
        assert gauges["sagas{state=AWAITING_DECISION}"] == 1


def test_stuck_lists_sagas_past_deadline_plus_grace(setup: Setup) -> None:
    c = setup.client
    deadline = setup.store.get(setup.saga_id).deadline_at  # type: ignore[union-attr]
    assert deadline is not None
    setup.now = deadline + timedelta(seconds=30)
    assert c.get("/sagas/stuck", headers=OFFICER).json()["count"] == 0  # within grace
    setup.now = deadline + timedelta(seconds=61)
    body = c.get("/sagas/stuck", headers=OFFICER).json()
    assert body["count"] == 1 and body["items"][0]["saga_id"] == setup.saga_id
    assert c.get("/sagas/stuck?grace_s=3600", headers=OFFICER).json()["count"] == 0
    body = problem(c.get("/sagas/stuck?grace_s=-1", headers=OFFICER), 400, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["grace_s"]
    metrics = c.get("/sagas/metrics", headers=OFFICER).json()
    assert metrics["gauges"]["sagas_stuck"] == 1
    assert metrics["gauges"]["sagas{state=AWAITING_DECISION}"] == 1
    assert metrics["gauges"]["sagas_alerting"] == 0
    assert metrics["counters"]["transitions_total{AWAITING_DECISION}"] == 2  # both tenants


def test_storage_failure_is_a_503_without_details(setup: Setup) -> None:
    class Broken(MemorySagaStore):
        def get(self, saga_id: str) -> Any:
            raise OSError("connection refused: secret-host:5432")

    client = TestClient(build_app(Broken(), setup.orch, lambda *a, **k: None, edge=EDGE),
                        raise_server_exceptions=False)
    r = client.get(f"/sagas/{UNKNOWN}", headers=OFFICER)
    problem(r, 503, "service_unavailable")
    assert r.headers["retry-after"] == "1" and "secret-host" not in r.text


@pytest.mark.parametrize("settings_path", [
    "services.saga.settings:SagaSettings", "services.decision.settings:DecisionSettings",
    "services.notification.settings:NotificationSettings"])
def test_edge_settings_and_the_dev_key_refused_in_production(
        settings_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from casestream.errors import ConfigError
    from casestream.http.edge import edge_policy

    module, name = settings_path.split(":")
    cls = getattr(importlib.import_module(module), name)
    prefix = f"CASESTREAM_{module.split('.')[1].upper()}_"
    monkeypatch.setenv(prefix + "MAX_IN_FLIGHT", "7")
    monkeypatch.setenv(prefix + "RATE_CLIENT_BURST", "9")
    policy = edge_policy(cls(), "svc")
    assert policy.max_in_flight == 7 and policy.per_client is not None
    assert policy.per_client.burst == 9
    monkeypatch.setenv("CASESTREAM_AUTO_REGISTER_SCHEMAS", "false")
    with pytest.raises(ConfigError):
        edge_policy(cls(), "svc")
