"""The decision use case with in-memory adapters: reply events, one decision per case."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from casestream.events.envelope import Envelope, new_event
from casestream.testing import MemorySink
from services.decision.adapters.memory import MemoryDecisionStore
from services.decision.application.decide import Decider
from services.decision.domain import Outcome

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def request(case_id: str = "case-1", *, saga_id: str = "saga-1", severity: int = 4,
            evidence: int = 2, title: str | None = None, version: int = 1) -> Envelope:
    payload: dict[str, object] = {"case_id": case_id, "severity": severity,
                                  "evidence_count": evidence}
    if title is not None:
        payload["title"] = title
    return new_event(event_type="DecisionRequested", aggregate_type="saga", aggregate_id=saga_id,
                     aggregate_version=version, tenant_id="tenant-a", source="saga",
                     actor_id="saga-orchestrator", correlation_id=case_id,
                     traceparent="00-t-s-01", payload=payload)


@pytest.fixture
def world() -> tuple[Decider, MemoryDecisionStore, MemorySink]:
    return Decider(clock=lambda: T0), MemoryDecisionStore(), MemorySink()


def test_violation_reply_envelope(world) -> None:
    decider, store, sink = world
    req = request()
    decision = decider.handle(store, sink, req)
    assert decision.verdict.outcome is Outcome.VIOLATION
    ev, penalty = sink.events
    assert ev.event_type == "ViolationDetermined"
    assert penalty.event_type == "PenaltyProposed" and penalty.aggregate_version == 2
    assert penalty.payload == {
        "case_id": "case-1", "saga_id": "saga-1", "penalty_cents": 400_000,
        "violation_code": "REG-4", "rules_version": "2025-01",
        "reason": "severity 4 x 2 evidence item(s) x EUR 500.00 (rules 2025-01, rule 3)"}
    assert ev.payload == {"case_id": "case-1", "saga_id": "saga-1", "violation_code": "REG-4",
                          "penalty_cents": 400_000}
    assert (ev.aggregate_type, ev.aggregate_id, ev.aggregate_version) == ("decision", "case-1", 1)
    assert (ev.correlation_id, ev.causation_id, ev.traceparent) == ("case-1", req.event_id,
                                                                    "00-t-s-01")
    assert (ev.source, ev.tenant_id) == ("decision", "tenant-a")


def test_no_violation_reply(world) -> None:
    decider, store, sink = world
    decider.handle(store, sink, request(severity=2))
    assert [(e.event_type, e.payload) for e in sink.events] == [
        ("NoViolationFound", {"case_id": "case-1", "saga_id": "saga-1"})]


def test_fail_marker_gives_decision_failed_with_reason(world) -> None:
    decider, store, sink = world
    decider.handle(store, sink, request(title="Tank [fail-decision]"))
    [ev] = sink.events
    assert ev.event_type == "DecisionFailed"
    assert ev.payload["reason"].startswith("decision engine rejected the case: ")


def test_missing_title_is_treated_as_empty(world) -> None:
    decider, store, sink = world
    decider.handle(store, sink, request(title=None))
    assert sink.events[0].event_type == "ViolationDetermined"


def test_one_decision_per_case_later_requests_get_the_stored_verdict(world) -> None:
    decider, store, sink = world
    decider.handle(store, sink, request())
    # a later request (another saga) with different facts: the stored verdict stands
    again = decider.handle(store, sink, request(saga_id="saga-2", severity=1, version=1))
    assert again.verdict.outcome is Outcome.VIOLATION and again.saga_id == "saga-2"
    assert len(store.decisions) == 1
    assert [(e.event_type, e.aggregate_version) for e in sink.events] == [
        ("ViolationDetermined", 1), ("PenaltyProposed", 2),
        ("ViolationDetermined", 3), ("PenaltyProposed", 4)]
    assert sink.events[2].payload["saga_id"] == "saga-2"
    assert sink.events[3].payload["reason"] == sink.events[1].payload["reason"]
    assert store.get("case-1").version == 4  # type: ignore[union-attr]


def test_unreadable_request_raises(world) -> None:
    decider, store, sink = world
    bad = new_event(event_type="DecisionRequested", aggregate_type="saga", aggregate_id="s",
                    aggregate_version=1, tenant_id="t", source="saga", actor_id="a",
                    correlation_id="c", payload={"case_id": "c"})
    with pytest.raises(KeyError):
        decider.handle(store, sink, bad)
    assert store.decisions == {} and sink.events == []
