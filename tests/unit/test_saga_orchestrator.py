"""The orchestrator use case with in-memory adapters: routing, envelopes, duplicates, late
replies, deadlines, resolve, and the definition-vs-catalog check."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from casestream.events.catalog import load_catalog
from casestream.events.envelope import Envelope, new_event
from casestream.errors import ConcurrencyError, ConfigError
from casestream.testing import MemorySink
from services.saga.adapters.memory import MemorySagaStore
from services.saga.application.contract import check_against_catalog, payload_fields
from services.saga.application.orchestrator import Orchestrator, saga_id_for
from services.saga.domain import Disposition, UnknownTrigger, case_review_saga
from services.saga.domain import case_review as cr
from services import schemas_dir

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CASE = "5d1c8f5e-0000-4000-8000-000000000001"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def submitted(case_id: str = CASE, *, title: str = "Leaky tank", severity: int = 4,
              evidence: int = 2, version: int = 2) -> Envelope:
    return new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=version, tenant_id="tenant-a", source="case",
                     actor_id="officer-7", correlation_id=case_id, traceparent="00-abc-def-01",
                     payload={"title": title, "severity": severity, "evidence_count": evidence,
                              "reporter_email": "inspector@example.org",
                              "submitted_by": "officer-7"})


def reply(event_type: str, saga_id: str, payload: dict[str, Any], *,
          aggregate: str = "decision", case_id: str = CASE) -> Envelope:
    return new_event(event_type=event_type, aggregate_type=aggregate, aggregate_id=case_id,
                     aggregate_version=1, tenant_id="tenant-a", source=aggregate,
                     actor_id="svc", correlation_id=case_id,
                     payload={"case_id": case_id, "saga_id": saga_id, **payload})


def case_event(event_type: str, payload: dict[str, Any], *, case_id: str = CASE,
               version: int = 3) -> Envelope:
    return new_event(event_type=event_type, aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=version, tenant_id="tenant-a", source="case",
                     actor_id="svc", correlation_id=case_id, payload=payload)


@pytest.fixture
def world() -> tuple[Orchestrator, MemorySagaStore, MemorySink, Clock]:
    clock = Clock()
    return Orchestrator(case_review_saga(), clock=clock), MemorySagaStore(), MemorySink(), clock


def test_start_emits_a_decision_request_with_the_journey_ids(world) -> None:
    orch, store, sink, _ = world
    event = submitted()
    done = orch.handle(store, sink, event)
    assert done.disposition is Disposition.STARTED
    assert done.saga_id == saga_id_for(event.event_id)
    saga = store.get(done.saga_id)
    assert saga is not None and saga.state == cr.AWAITING_DECISION and saga.version == 1
    [req] = sink.events
    assert req.event_type == "DecisionRequested"
    assert (req.aggregate_type, req.aggregate_id, req.aggregate_version) == ("saga", saga.saga_id, 1)
    assert (req.correlation_id, req.causation_id, req.tenant_id) == (saga.saga_id, event.event_id,
                                                                     "tenant-a")
    assert req.traceparent == event.traceparent and req.source == "saga"
    assert req.payload["case_id"] == CASE and req.payload["severity"] == 4


def test_redelivered_start_event_is_a_no_op(world) -> None:
    orch, store, sink, _ = world
    event = submitted()
    orch.handle(store, sink, event)
    again = orch.handle(store, sink, event)
    assert again.disposition is None and again.note == "duplicate start"
    assert len(sink.events) == 1 and len(store.sagas) == 1


def test_second_submit_while_a_saga_is_active_is_recorded_and_ignored(world) -> None:
    orch, store, sink, _ = world
    first = orch.handle(store, sink, submitted())
    second = orch.handle(store, sink, submitted(version=4))
    assert second.disposition is Disposition.IGNORED and second.saga_id == first.saga_id
    assert len(store.sagas) == 1 and len(sink.events) == 1
    assert store.histories[first.saga_id][-1].disposition is Disposition.IGNORED


def test_violation_journey_end_to_end(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id
    assert saga_id is not None
    steps = [
        reply("ViolationDetermined", saga_id, {"violation_code": "REG-4", "penalty_cents": 400_000}),
        reply("NoticeIssued", saga_id, {"recipient_email": "inspector@example.org",
                                        "message_id": "<x@y>"}, aggregate="notice"),
        case_event("CaseClosed", {"outcome": "violation", "penalty_cents": 400_000}),
    ]
    for event in steps:
        assert orch.handle(store, sink, event).disposition is Disposition.TRANSITIONED
    saga = store.get(saga_id)
    assert saga is not None and saga.state == cr.COMPLETED
    assert [e.event_type for e in sink.events] == ["DecisionRequested", "NoticeRequested",
                                                   "CaseCloseRequested", "SagaCompleted"]
    assert [e.aggregate_version for e in sink.events] == [1, 2, 3, 4]
    # each request is caused by the event that triggered it
    assert [e.causation_id for e in sink.events[1:]] == [
        steps[0].event_id, steps[1].event_id, steps[2].event_id, ]
    assert {e.correlation_id for e in sink.events} == {saga_id}  # the saga id
    assert sink.events[2].payload == {"case_id": CASE, "outcome": "violation",
                                      "penalty_cents": 400_000}
    assert not store.active[saga_id]


def test_duplicate_reply_is_a_silent_no_op(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id
    assert saga_id is not None
    event = reply("NoViolationFound", saga_id, {})
    orch.handle(store, sink, event)
    entries, events = len(store.histories[saga_id]), len(sink.events)
    done = orch.handle(store, sink, event)
    assert done.disposition is None and done.note == "duplicate"
    assert (len(store.histories[saga_id]), len(sink.events)) == (entries, events)


def test_decision_deadline_compensates_and_a_late_decision_changes_nothing(world) -> None:
    orch, store, sink, clock = world
    saga_id = orch.handle(store, sink, submitted()).saga_id
    assert saga_id is not None
    clock.now = T0 + timedelta(minutes=5)
    assert orch.fire_due(store, sink) == 1
    saga = store.get(saga_id)
    assert saga is not None and saga.state == cr.COMPENSATING
    assert sink.events[-1].event_type == "CaseReturnRequested"
    assert sink.events[-1].causation_id == saga.last_event_id  # the submit that opened the step
    before = len(sink.events)
    late = orch.handle(store, sink, reply("ViolationDetermined", saga_id,
                                          {"violation_code": "REG-4", "penalty_cents": 1}))
    assert late.disposition is Disposition.LATE
    assert len(sink.events) == before
    assert orch.metrics.get("late_replies_total", "ViolationDetermined") == 1
    assert store.histories[saga_id][-1].disposition is Disposition.LATE
    assert store.get(saga_id).state == cr.COMPENSATING  # type: ignore[union-attr]
    orch.handle(store, sink, case_event("CaseReturned", {"reason": "x"}))
    assert store.get(saga_id).state == cr.COMPENSATED  # type: ignore[union-attr]
    assert sink.events[-1].event_type == "SagaCompensated"


def test_nothing_fires_before_the_deadline(world) -> None:
    orch, store, sink, clock = world
    orch.handle(store, sink, submitted())
    clock.now = T0 + timedelta(minutes=4, seconds=59)
    assert orch.fire_due(store, sink) == 0
    assert len(sink.events) == 1


def test_reply_for_an_unknown_saga_is_dropped_not_raised(world) -> None:
    orch, store, sink, _ = world
    done = orch.handle(store, sink, reply("NoViolationFound", "no-such-saga", {}))
    assert done.saga_id is None and sink.events == []
    done = orch.handle(store, sink, case_event("CaseClosed", {"outcome": "violation",
                                                              "penalty_cents": 1}))
    assert done.saga_id is None


def test_reply_naming_another_case_is_dropped(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id
    assert saga_id is not None
    done = orch.handle(store, sink, reply("NoViolationFound", saga_id, {}, case_id="other-case"))
    assert done.note == "case mismatch"
    assert store.get(saga_id).state == cr.AWAITING_DECISION  # type: ignore[union-attr]


def test_case_can_get_a_new_saga_after_the_previous_one_finished(world) -> None:
    orch, store, sink, _ = world
    first = orch.handle(store, sink, submitted()).saga_id
    assert first is not None
    orch.handle(store, sink, reply("DecisionFailed", first, {"reason": "r"}))
    orch.handle(store, sink, case_event("CaseReturned", {"reason": "r"}))
    second = orch.handle(store, sink, submitted(version=5))
    assert second.disposition is Disposition.STARTED and second.saga_id != first
    # the case's later events go to the newest saga
    orch.handle(store, sink, reply("NoViolationFound", second.saga_id or "", {}))
    orch.handle(store, sink, case_event("CaseClosed", {"outcome": "no_violation",
                                                       "penalty_cents": None}, version=7))
    assert store.get(second.saga_id or "").state == cr.COMPLETED  # type: ignore[union-attr]
    assert store.get(first).state == cr.COMPENSATED  # type: ignore[union-attr]


def test_store_refuses_a_stale_version(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id
    saga = store.get(saga_id or "")
    assert saga is not None
    store.update(replace(saga, version=2), expected_version=1, active=True)
    with pytest.raises(ConcurrencyError):
        store.update(replace(saga, version=2), expected_version=1, active=True)


def test_resolve_manual_review_closes_the_case_and_refuses_elsewhere(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    with pytest.raises(UnknownTrigger):
        orch.resolve(store, sink, saga_id, reason="x", actor_id="op")
    orch.handle(store, sink, reply("ViolationDetermined", saga_id,
                                   {"violation_code": "REG-4", "penalty_cents": 400_000}))
    orch.handle(store, sink, reply("NoticeFailed", saga_id, {"reason": "bounced"},
                                   aggregate="notice"))
    assert store.get(saga_id).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]
    saga = orch.resolve(store, sink, saga_id, reason="delivered by hand", actor_id="op-1")
    assert saga is not None and saga.state == cr.AWAITING_CLOSE
    assert sink.events[-1].event_type == "CaseCloseRequested"
    assert sink.events[-1].actor_id == "op-1"
    assert store.histories[saga_id][-1].note == "delivered by hand"
    assert orch.resolve(store, sink, "unknown", reason="x", actor_id="op") is None


def test_definition_matches_the_catalog() -> None:
    catalog = load_catalog(schemas_dir())
    definition = case_review_saga(
        decision_request_fields=payload_fields(catalog, "DecisionRequested"))
    check_against_catalog(definition, catalog)


def test_catalog_mismatch_stops_start_up() -> None:
    catalog = load_catalog(schemas_dir())
    definition = case_review_saga(decision_request_fields=("case_id", "severity"))
    with pytest.raises(ConfigError, match="DecisionRequested: the saga fills"):
        check_against_catalog(definition, catalog)


def test_service_builds_its_definition_from_settings_and_catalog() -> None:
    from services.saga.bootstrap import definition_from
    from services.saga.settings import SagaSettings

    settings = SagaSettings(CASESTREAM_SAGA_DECISION_DEADLINE_S=7, CASESTREAM_SAGA_CLOSE_ATTEMPTS=5)
    d = definition_from(settings, load_catalog(schemas_dir()))
    assert d.step("decide").deadline == timedelta(seconds=7)
    assert d.step("close").retry.max_attempts == 5
    assert {t for t, _ in d.step("decide").action.payload} == set(
        payload_fields(load_catalog(schemas_dir()), "DecisionRequested"))


def test_compensation_failing_always_ends_in_compensation_failed_with_an_alert(
        world, caplog: pytest.LogCaptureFixture) -> None:
    """Bounded compensation retries (3 issues), then COMPENSATION_FAILED: logged at ERROR,
    counted, announced — never stuck in COMPENSATING."""
    orch, store, sink, clock = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    orch.handle(store, sink, reply("DecisionFailed", saga_id, {"reason": "engine down"}))
    for _ in range(3):  # attempts 2 and 3 re-issue, the 3rd deadline gives up
        clock.now += timedelta(minutes=3)
        assert orch.fire_due(store, sink) == 1
    saga = store.get(saga_id)
    assert saga is not None and saga.state == cr.COMPENSATION_FAILED
    assert saga.deadline_at is None
    types = [e.event_type for e in sink.events]
    assert types.count("CaseReturnRequested") == 3
    assert types[-1] == "SagaCompensationFailed"
    assert orch.metrics.get("alerts_total", cr.COMPENSATION_FAILED) == 1
    alerts = [r for r in caplog.records if r.levelname == "ERROR" and "ALERT" in r.message]
    assert len(alerts) == 1 and saga_id in alerts[0].message
    clock.now += timedelta(hours=1)
    assert orch.fire_due(store, sink) == 0  # nothing left to fire


def test_compensation_confirmed_on_the_third_attempt_compensates(world) -> None:
    orch, store, sink, clock = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    orch.handle(store, sink, reply("DecisionFailed", saga_id, {"reason": "engine down"}))
    for _ in range(2):
        clock.now += timedelta(minutes=3)
        orch.fire_due(store, sink)
    assert store.get(saga_id).attempts == 3  # type: ignore[union-attr]
    orch.handle(store, sink, case_event("CaseReturned", {"reason": "engine down"}))
    assert store.get(saga_id).state == cr.COMPENSATED  # type: ignore[union-attr]
    assert orch.metrics.get("alerts_total", cr.COMPENSATION_FAILED) == 0


def test_manual_review_and_resolution_are_announced(world) -> None:
    orch, store, sink, clock = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    orch.handle(store, sink, reply("ViolationDetermined", saga_id,
                                   {"violation_code": "REG-4", "penalty_cents": 5}))
    orch.handle(store, sink, reply("NoticeFailed", saga_id, {"reason": "bounced"}))
    assert sink.events[-1].event_type == "SagaManualReviewRequired"
    assert dict(sink.events[-1].payload) == {"case_id": CASE, "reason": "bounced"}
    orch.resolve(store, sink, saga_id, reason="sent by post", actor_id="op-1")
    resolved, close = sink.events[-2:]
    assert (resolved.event_type, close.event_type) == ("SagaResolved", "CaseCloseRequested")
    assert dict(resolved.payload) == {"case_id": CASE, "resolution": "close",
                                      "reason": "sent by post"}
    assert resolved.actor_id == "op-1" and resolved.correlation_id == saga_id
    assert [e.aggregate_version for e in sink.events] == list(range(1, len(sink.events) + 1))


def test_resolve_for_another_tenant_is_unknown_before_any_state_check(world) -> None:
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    tenant = store.get(saga_id).tenant_id  # type: ignore[union-attr]
    # not resolvable in its state, but another tenant learns nothing: None, not UnknownTrigger
    assert orch.resolve(store, sink, saga_id, reason="x", actor_id="op",
                        tenant_id=tenant + "-other") is None
    with pytest.raises(UnknownTrigger):
        orch.resolve(store, sink, saga_id, reason="x", actor_id="op", tenant_id=tenant)


def test_same_reply_emitted_twice_with_new_event_ids_is_a_no_op(world) -> None:
    """A participant that retried emits its reply twice as two distinct events (new event
    ids, same saga and step): the inbox and ``store.seen`` cannot catch the second one, the
    engine must: one transition, one follow-up request, the second recorded as ignored."""
    orch, store, sink, _ = world
    saga_id = orch.handle(store, sink, submitted()).saga_id or ""
    first = reply("NoViolationFound", saga_id, {})
    second = reply("NoViolationFound", saga_id, {})
    assert first.event_id != second.event_id and first.payload == second.payload
    assert orch.handle(store, sink, first).disposition is Disposition.TRANSITIONED
    saga = store.get(saga_id)
    assert saga is not None and saga.state == cr.AWAITING_CLOSE
    again = orch.handle(store, sink, second)
    assert again.disposition is Disposition.IGNORED
    assert store.get(saga_id) == saga  # same state, step, attempts, deadline, version
    assert [e.event_type for e in sink.events] == ["DecisionRequested", "CaseCloseRequested"]
    transitions = [h for h in store.histories[saga_id]
                   if h.disposition is Disposition.TRANSITIONED]
    assert [h.event_id for h in transitions] == [first.event_id]
    assert store.histories[saga_id][-1].event_id == second.event_id
    assert orch.metrics.get("ignored_replies_total") == 1
    # the re-issued close request answered twice (two CaseClosed events): completes once
    orch.handle(store, sink, case_event("CaseClosed", {"outcome": "no_violation",
                                                       "penalty_cents": None}))
    orch.handle(store, sink, case_event("CaseClosed", {"outcome": "no_violation",
                                                       "penalty_cents": None}, version=4))
    assert [e.event_type for e in sink.events] == ["DecisionRequested", "CaseCloseRequested",
                                                   "SagaCompleted"]


@pytest.mark.parametrize("correlation", [CASE, "journey-7f3a"],
                         ids=["case-id-as-correlation", "distinct-correlation"])
def test_every_saga_event_carries_the_journey_correlation_and_its_cause(
        world, correlation: str) -> None:
    """Every event the saga emits — on every path: start, replies, operator resolve,
    deadline retries, deadline transitions, announcements — has correlation_id = its saga
    id (never the CaseSubmitted's own correlation id, whatever that is) and
    causation_id = the id of the event that caused it. Deadline- and operator-driven events have no causing event: their
    causation is the last event that changed the saga (``last_event_id``)."""
    orch, store, sink, clock = world

    def journey_event(event_type: str, aggregate: str, case_id: str, version: int,
                      payload: dict[str, Any]) -> Envelope:
        return new_event(event_type=event_type, aggregate_type=aggregate, aggregate_id=case_id,
                         aggregate_version=version, tenant_id="tenant-a", source=aggregate,
                         actor_id="svc", correlation_id=correlation, payload=payload)

    checked: list[tuple[str, str | None]] = []

    def expect(cause: str, action: Any) -> None:
        before = len(sink.events)
        action()
        new = sink.events[before:]
        assert new, "the action emitted nothing"
        for e in new:
            checked.append((e.event_type, e.causation_id))
            assert e.aggregate_type == "saga" and e.correlation_id == e.aggregate_id, e.event_type
            assert e.correlation_id != correlation, e.event_type
            assert e.causation_id == cause, e.event_type

    def silent(action: Any) -> None:
        before = len(sink.events)
        action()
        assert len(sink.events) == before

    def start(case_id: str) -> tuple[Envelope, str]:
        start_event = journey_event("CaseSubmitted", "case", case_id, 2, {
            "title": "T", "severity": 4, "evidence_count": 1,
            "reporter_email": "inspector@example.org", "submitted_by": "officer-7"})
        expect(start_event.event_id, lambda: orch.handle(store, sink, start_event))
        return start_event, saga_id_for(start_event.event_id)

    # 1: violation -> notice failed -> manual review -> resolved -> close retried -> closed
    case1 = "case-corr-1"
    _, s1 = start(case1)
    violation = journey_event("ViolationDetermined", "decision", case1, 1, {
        "case_id": case1, "saga_id": s1, "violation_code": "REG-4", "penalty_cents": 5})
    expect(violation.event_id, lambda: orch.handle(store, sink, violation))
    failed = journey_event("NoticeFailed", "notice", case1, 1,
                           {"case_id": case1, "saga_id": s1, "reason": "bounced"})
    expect(failed.event_id, lambda: orch.handle(store, sink, failed))  # manual review
    expect(failed.event_id, lambda: orch.resolve(store, sink, s1, reason="by post",
                                                 actor_id="op-1"))
    clock.now += timedelta(minutes=2)
    expect(failed.event_id, lambda: orch.fire_due(store, sink))  # close re-issued
    closed = journey_event("CaseClosed", "case", case1, 3,
                           {"outcome": "violation", "penalty_cents": 5})
    expect(closed.event_id, lambda: orch.handle(store, sink, closed))  # SagaCompleted
    late = journey_event("ViolationDetermined", "decision", case1, 2, {
        "case_id": case1, "saga_id": s1, "violation_code": "REG-4", "penalty_cents": 5})
    silent(lambda: orch.handle(store, sink, late))
    # 2: decision deadline -> compensation re-issued -> given up
    case2 = "case-corr-2"
    submitted2, _ = start(case2)
    clock.now += timedelta(minutes=5)
    expect(submitted2.event_id, lambda: orch.fire_due(store, sink))  # CaseReturnRequested
    for _ in range(3):  # two re-issues, then SagaCompensationFailed
        clock.now += timedelta(minutes=3)
        expect(submitted2.event_id, lambda: orch.fire_due(store, sink))
    # 3: decision failed -> compensation confirmed
    case3 = "case-corr-3"
    _, s3 = start(case3)
    decision_failed = journey_event("DecisionFailed", "decision", case3, 1,
                                    {"case_id": case3, "saga_id": s3, "reason": "engine down"})
    expect(decision_failed.event_id, lambda: orch.handle(store, sink, decision_failed))
    returned = journey_event("CaseReturned", "case", case3, 3, {"reason": "engine down"})
    expect(returned.event_id, lambda: orch.handle(store, sink, returned))

    assert len(checked) == len(sink.events)  # every emitted event was checked
    assert {t for t, _ in checked} == orch.definition.emitted_event_types()  # every kind


class _NoSavepointConn:
    """A connection that fails any savepoint: the handler must run in the caller's
    transaction (the runtime's batch, which isolates a failed message itself)."""

    def transaction(self) -> Any:
        raise AssertionError("the saga handler opened a savepoint of its own")


def test_the_handler_retries_a_conflict_in_the_batch_transaction_without_a_savepoint() -> None:
    from casestream.errors import RetryableError
    from services.saga.adapters.handlers import handle_event
    from services.saga.application.orchestrator import Handled

    class ConflictsOnce(Orchestrator):
        calls = 0

        def handle(self, store: Any, sink: Any, event: Envelope) -> Handled:
            ConflictsOnce.calls += 1
            if ConflictsOnce.calls == 1:
                raise ConcurrencyError("saga", "s", 1, 2)  # found before any write
            return Handled(saga_id="s", disposition=Disposition.TRANSITIONED)

    orch = ConflictsOnce(case_review_saga(), clock=Clock())
    done = handle_event(orch, _NoSavepointConn(), None, submitted())
    assert done.saga_id == "s" and ConflictsOnce.calls == 2

    class AlwaysConflicts(Orchestrator):
        def handle(self, store: Any, sink: Any, event: Envelope) -> Handled:
            raise ConcurrencyError("saga", "s", 1, 2)

    with pytest.raises(RetryableError, match="concurrently"):
        handle_event(AlwaysConflicts(case_review_saga(), clock=Clock()), _NoSavepointConn(),
                     None, submitted())
