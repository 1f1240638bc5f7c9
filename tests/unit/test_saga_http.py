"""The saga HTTP API over the in-memory store (starlette TestClient)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from casestream.envelope import new_event
from services.saga.adapters.http import build_app
from services.saga.adapters.memory import MemorySagaStore, MemorySink
from services.saga.application.orchestrator import Orchestrator
from services.saga.domain import case_review_saga
from services.saga.domain import case_review as cr

pytestmark = pytest.mark.unit

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CASE = "case-1"


@pytest.fixture
def setup():
    store, sink = MemorySagaStore(), MemorySink()
    orch = Orchestrator(case_review_saga(), clock=lambda: T0)
    start = new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=CASE,
                      aggregate_version=2, tenant_id="t", source="case", actor_id="a",
                      correlation_id=CASE,
                      payload={"title": "T", "severity": 4, "evidence_count": 1,
                               "reporter_email": "r@example.org", "submitted_by": "a"})
    saga_id = orch.handle(store, sink, start).saga_id or ""

    def resolver(sid: str, reason: str, actor: str):
        return orch.resolve(store, sink, sid, reason=reason, actor_id=actor)

    client = TestClient(build_app(store, orch, resolver))
    return client, store, sink, orch, saga_id


def test_get_saga_shows_state_deadline_and_history(setup) -> None:
    client, _, _, _, saga_id = setup
    r = client.get(f"/sagas/{saga_id}")
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == cr.AWAITING_DECISION and body["state_kind"] == "active"
    assert body["deadline"]["step"] == "decide" and body["deadline"]["max_attempts"] == 1
    assert body["deadline"]["at"].startswith("2025-01-01T12:05")
    assert [h["trigger"] for h in body["history"]] == ["CaseSubmitted"]


def test_unknown_and_malformed_ids(setup) -> None:
    client = setup[0]
    r = client.get("/sagas/00000000-0000-4000-8000-000000000000")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = client.get("/sagas/not-a-uuid")
    assert r.status_code == 400 and r.json()["field"] == "saga_id"


def test_list_filters_by_state_and_validates_input(setup) -> None:
    client, _, _, _, saga_id = setup
    assert [s["saga_id"] for s in client.get("/sagas?state=AWAITING_DECISION").json()["items"]] \
        == [saga_id]
    assert client.get("/sagas?state=COMPLETED").json()["count"] == 0
    assert client.get("/sagas?state=NOPE").status_code == 400
    assert client.get("/sagas?limit=0").status_code == 400
    assert client.get(f"/sagas?case_id={CASE}").json()["count"] == 1


def test_resolve_needs_a_reason_and_a_parked_saga(setup) -> None:
    client, store, sink, orch, saga_id = setup
    assert client.post(f"/sagas/{saga_id}/resolve", json={}).status_code == 400
    assert client.post(f"/sagas/{saga_id}/resolve", content=b"{").status_code == 400
    r = client.post(f"/sagas/{saga_id}/resolve", json={"reason": "x"})
    assert r.status_code == 409 and r.json()["state"] == cr.AWAITING_DECISION
    for event_type, payload in [("ViolationDetermined", {"violation_code": "REG-4",
                                                         "penalty_cents": 200_000}),
                                ("NoticeFailed", {"reason": "bounced"})]:
        orch.handle(store, sink, new_event(
            event_type=event_type, aggregate_type="x", aggregate_id=CASE, aggregate_version=1,
            tenant_id="t", source="x", actor_id="a", correlation_id=CASE,
            payload={"case_id": CASE, "saga_id": saga_id, **payload}))
    r = client.post(f"/sagas/{saga_id}/resolve", json={"reason": "sent by post"},
                    headers={"X-Actor-Id": "op-7"})
    assert r.status_code == 200 and r.json()["state"] == cr.AWAITING_CLOSE
    assert sink.events[-1].actor_id == "op-7"
    r = client.post("/sagas/00000000-0000-4000-8000-000000000000/resolve", json={"reason": "x"})
    assert r.status_code == 404


def test_stuck_lists_sagas_past_deadline_plus_grace(setup) -> None:
    client, store, sink, orch, saga_id = setup
    app_now = {"now": T0}
    from datetime import timedelta

    from services.saga.adapters.http import build_app
    client = TestClient(build_app(store, orch, lambda *a: None, stuck_grace=timedelta(seconds=60),
                                  clock=lambda: app_now["now"]))
    deadline = store.get(saga_id).deadline_at  # type: ignore[union-attr]
    app_now["now"] = deadline + timedelta(seconds=30)
    assert client.get("/sagas/stuck").json()["count"] == 0  # within grace
    app_now["now"] = deadline + timedelta(seconds=61)
    body = client.get("/sagas/stuck").json()
    assert body["count"] == 1 and body["items"][0]["saga_id"] == saga_id
    assert client.get("/sagas/stuck?grace_s=3600").json()["count"] == 0
    assert client.get("/sagas/stuck?grace_s=-1").status_code == 400
    metrics = client.get("/sagas/metrics").json()
    assert metrics["gauges"]["sagas_stuck"] == 1
    assert metrics["gauges"]["sagas{state=AWAITING_DECISION}"] == 1
    assert metrics["gauges"]["sagas_alerting"] == 0
    assert metrics["counters"]["transitions_total{AWAITING_DECISION}"] == 1
