"""Unit tests of the audit use cases and HTTP API over in-memory adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.events.envelope import new_event
from casestream.handlers.registry import HandlerKind
from casestream.http import EdgePolicy
from casestream.handlers.processing import ProcessingMode
from services.audit.adapters.handlers import build_registry
from services.audit.adapters.http import build_app
from services.audit.application import (
    CaseTimeline,
    TimelineEvent,
    case_timeline,
    entry_from,
    record_event,
)
from services.audit.domain import KNOWN_EVENT_TYPES, JournalEntry, TimelineNotFound

EDGE = EdgePolicy(verifier=TokenVerifier(AuthSettings()))

T0 = datetime(2025, 6, 1, tzinfo=UTC)


class MemoryJournal:
    """``AuditJournal`` + ``TimelineReader`` in memory."""

    def __init__(self) -> None:
        self.entries: dict[str, JournalEntry] = {}

    def record(self, entry: JournalEntry) -> None:
        self.entries.setdefault(entry.event_id, entry)

    def timeline(self, tenant_id: str, case_id: str) -> CaseTimeline | None:
        mine = sorted((e for e in self.entries.values()
                       if e.case_id == case_id and e.tenant_id == tenant_id),
                      key=lambda e: (e.occurred_at, e.aggregate_version, e.event_id))
        if not mine:
            return None
        events = tuple(TimelineEvent(
            event_id=e.event_id, event_type=e.event_type, event_version=e.event_version,
            aggregate_type=e.aggregate_type, aggregate_version=e.aggregate_version,
            occurred_at=e.occurred_at, published_at=e.published_at, source=e.source,
            summary=e.summary) for e in mine)
        return CaseTimeline(case_id=case_id, tenant_id=tenant_id, events=events,
                            case_last_applied_at=T0, projection_last_applied_at=T0)


def saga_event(case_id: str = "c-1", tenant: str = "t1", seconds: int = 0):  # noqa: ANN201
    return new_event(event_type="CaseCloseRequested", aggregate_type="saga", aggregate_id="s-1",
                     aggregate_version=3, payload={"case_id": case_id, "outcome": "no_violation",
                                                   "penalty_cents": None},
                     tenant_id=tenant, source="saga", actor_id="saga", correlation_id=case_id,
                     event_version=1, occurred_at=T0 + timedelta(seconds=seconds))


def test_entry_derives_case_and_summary_and_keeps_envelope() -> None:
    event = saga_event()
    entry = entry_from(event)
    assert entry.case_id == "c-1" and entry.aggregate_id == "s-1"
    assert entry.summary == "Close requested: no_violation, no penalty"
    assert (entry.event_id, entry.tenant_id, entry.correlation_id) == (event.event_id, "t1", "c-1")
    assert dict(entry.payload) == dict(event.payload)


def test_recording_twice_is_a_no_op() -> None:
    journal = MemoryJournal()
    event = saga_event()
    record_event(journal, event)
    record_event(journal, saga_event(seconds=1))
    record_event(journal, event)
    assert len(journal.entries) == 2
    assert [e.event_type for e in case_timeline(journal, "t1", "c-1").events] == [
        "CaseCloseRequested", "CaseCloseRequested"]


def test_timeline_not_found_for_other_tenant() -> None:
    journal = MemoryJournal()
    record_event(journal, saga_event())
    assert case_timeline(journal, "t1", "c-1").events[0].event_type == "CaseCloseRequested"
    with pytest.raises(TimelineNotFound):
        case_timeline(journal, "t2", "c-1")


def test_registry_declares_projections_for_every_event_type() -> None:
    registry = build_registry()
    assert registry.event_types == KNOWN_EVENT_TYPES
    for event_type in KNOWN_EVENT_TYPES:
        [handler] = registry.handlers_for(event_type, ProcessingMode.REPLAY)
        assert handler.kind is HandlerKind.PROJECTION
    assert "Later" in build_registry(event_types=[*KNOWN_EVENT_TYPES, "Later"]).event_types


def test_http_timeline() -> None:
    journal = MemoryJournal()
    record_event(journal, saga_event(seconds=5))
    with TestClient(build_app(journal, edge=EDGE)) as client:
        ok = client.get("/audit/cases/c-1", headers=bearer_headers("t1"))
        assert ok.status_code == 200
        body = ok.json()
        assert body["case_id"] == "c-1" and len(body["events"]) == 1
        assert set(body["events"][0]) == {"event_id", "event_type", "event_version",
                                          "aggregate_type", "aggregate_version", "occurred_at",
                                          "published_at", "source", "summary"}
        assert body["freshness"] == {"case_last_applied_at": T0.isoformat(),
                                     "projection_last_applied_at": T0.isoformat()}
        for headers, status, code in [(bearer_headers("t2"), 404, "case_not_found"),
                                      ({"X-Tenant-Id": "t1"}, 401, "unauthorized"),
                                      ({"Authorization": "Bearer x.y.z"}, 401, "invalid_token")]:
            response = client.get("/audit/cases/c-1", headers=headers)
            assert response.status_code == status
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == code
        assert client.post("/audit/cases/c-1", headers=bearer_headers("t1")).status_code == 405


def test_http_store_failure_is_a_503_without_details() -> None:
    class Broken:
        def timeline(self, tenant_id: str, case_id: str) -> CaseTimeline | None:
            raise RuntimeError("connection to server at 10.0.0.1 failed: password=secret")

    with TestClient(build_app(Broken(), edge=EDGE)) as client:
        response = client.get("/audit/cases/c-1", headers=bearer_headers("t1"))
    assert response.status_code == 503 and response.json()["code"] == "service_unavailable"
    assert "secret" not in response.text and "10.0.0.1" not in response.text


def test_the_live_consumer_and_the_replay_run_one_registry() -> None:
    """The timeline's replay builds the live consumer's registry (for its shadow table): the
    same handler, a batch PROJECTION for every event type, that writes by COPY in a replay."""
    from casestream.handlers.projection import WRITES_BY_COPY
    from services.audit.adapters.replay import PROJECTION

    live = build_registry()
    replay = PROJECTION.registry(PROJECTION.shadow_names(), KNOWN_EVENT_TYPES)
    assert replay.event_types == live.event_types == KNOWN_EVENT_TYPES
    for event_type in KNOWN_EVENT_TYPES:
        [lh] = live.handlers_for(event_type, ProcessingMode.LIVE)
        [rh] = replay.handlers_for(event_type, ProcessingMode.REPLAY)
        assert lh.fn.__code__ is rh.fn.__code__ and lh.batch and rh.batch
        assert lh.kind is rh.kind is HandlerKind.PROJECTION
        assert getattr(rh.fn, WRITES_BY_COPY, False)
