"""Given/expect tests of the case-review saga: every transition of the definition.

Each case says: given a saga in a state (with the data it has there), when a trigger
arrives, expect the new state and exactly these requests. ``test_every_transition_is_covered``
fails when a transition is added to the definition without a case here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.saga.domain import (
    CASE_REVIEW,
    DEADLINE,
    RESOLVE,
    Disposition,
    SagaInstance,
    UnknownTrigger,
    apply_event,
    fire_deadline,
    resolve,
    start_saga,
)
from services.saga.domain import case_review as cr

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CASE = "case-1"
SAGA = "saga-1"

SUBMITTED = {"aggregate_id": CASE, "title": "Leaky tank", "severity": 4, "evidence_count": 2,
             "reporter_email": "inspector@example.org", "submitted_by": "officer-7"}
BASE_DATA = {"case_id": CASE, "title": "Leaky tank", "severity": 4, "evidence_count": 2,
             "recipient_email": "inspector@example.org"}
VIOLATION_DATA = {**BASE_DATA, "outcome": "violation", "violation_code": "REG-4",
                  "penalty_cents": 400_000}
NO_VIOLATION_DATA = {**BASE_DATA, "outcome": "no_violation", "penalty_cents": None}
RETURN_DATA = {**BASE_DATA, "reason": "decision engine rejected the case: test"}

DATA_IN = {
    cr.AWAITING_DECISION: BASE_DATA,
    cr.AWAITING_NOTICE: VIOLATION_DATA,
    cr.AWAITING_CLOSE: VIOLATION_DATA,
    cr.COMPENSATING: RETURN_DATA,
    cr.MANUAL_REVIEW: {**VIOLATION_DATA, "review_reason": "smtp said no"},
    cr.COMPLETED: VIOLATION_DATA,
    cr.COMPENSATED: RETURN_DATA,
}


def given(state: str, *, attempts: int = 1, data: dict[str, Any] | None = None,
          deadline_at: datetime | None = None) -> SagaInstance:
    """A saga in ``state`` as the engine leaves it there (step, attempts, deadline)."""
    st = CASE_REVIEW.state(state)
    step = CASE_REVIEW.step(st.step) if st.step else None
    if deadline_at is None and step is not None and step.deadline is not None:
        deadline_at = T0 + step.deadline
    return SagaInstance(saga_id=SAGA, definition=CASE_REVIEW.name, case_id=CASE, tenant_id="t1",
                        correlation_id=CASE, state=state, step=step.name if step else None,
                        attempts=attempts if step else 0, deadline_at=deadline_at,
                        data=DATA_IN[state] if data is None else data, version=3, event_seq=5,
                        last_event_id="prev-event")


@dataclass(frozen=True)
class Case:
    """given ``state`` (``attempts``) when ``trigger`` with ``payload`` expect ``to`` and ``requests``."""

    state: str
    trigger: str
    payload: dict[str, Any] = field(default_factory=dict)
    to: str = ""
    requests: tuple[tuple[str, dict[str, Any]], ...] = ()
    attempts: int = 1
    disposition: Disposition = Disposition.TRANSITIONED

    def id(self) -> str:
        return f"{self.state}--{self.trigger}@{self.attempts}-->{self.to}"


CASES = [
    Case(state=cr.AWAITING_DECISION, trigger="ViolationDetermined",
         payload={"case_id": CASE, "saga_id": SAGA, "violation_code": "REG-4",
                  "penalty_cents": 400_000},
         to=cr.AWAITING_NOTICE,
         requests=(("NoticeRequested", {"case_id": CASE, "recipient_email": "inspector@example.org",
                                        "penalty_cents": 400_000, "violation_code": "REG-4"}),)),
    Case(state=cr.AWAITING_DECISION, trigger="NoViolationFound",
         payload={"case_id": CASE, "saga_id": SAGA}, to=cr.AWAITING_CLOSE,
         requests=(("CaseCloseRequested", {"case_id": CASE, "outcome": "no_violation",
                                           "penalty_cents": None}),)),
    Case(state=cr.AWAITING_DECISION, trigger="DecisionFailed",
         payload={"case_id": CASE, "saga_id": SAGA, "reason": "decision engine rejected the case: x"},
         to=cr.COMPENSATING,
         requests=(("CaseReturnRequested", {"case_id": CASE,
                                            "reason": "decision engine rejected the case: x"}),)),
    Case(state=cr.AWAITING_DECISION, trigger=DEADLINE, to=cr.COMPENSATING,
         requests=(("CaseReturnRequested", {"case_id": CASE,
                                            "reason": "no decision before the decision deadline"}),)),
    Case(state=cr.AWAITING_NOTICE, trigger="NoticeIssued",
         payload={"case_id": CASE, "saga_id": SAGA, "recipient_email": "inspector@example.org",
                  "message_id": "<m@x>"},
         to=cr.AWAITING_CLOSE,
         requests=(("CaseCloseRequested", {"case_id": CASE, "outcome": "violation",
                                           "penalty_cents": 400_000}),)),
    Case(state=cr.AWAITING_NOTICE, trigger="NoticeFailed",
         payload={"case_id": CASE, "saga_id": SAGA, "reason": "mailbox unavailable"},
         to=cr.MANUAL_REVIEW,
         requests=(("SagaManualReviewRequired", {"case_id": CASE,
                                                 "reason": "mailbox unavailable"}),)),
    Case(state=cr.AWAITING_NOTICE, trigger=DEADLINE, to=cr.MANUAL_REVIEW,
         requests=(("SagaManualReviewRequired", {
             "case_id": CASE, "reason": "no notice outcome before the notice deadline"}),)),
    Case(state=cr.AWAITING_CLOSE, trigger="CaseClosed",
         payload={"outcome": "violation", "penalty_cents": 400_000}, to=cr.COMPLETED,
         requests=(("SagaCompleted", {"case_id": CASE, "outcome": "violation"}),)),
    Case(state=cr.AWAITING_CLOSE, trigger=DEADLINE, attempts=1, to=cr.AWAITING_CLOSE,
         disposition=Disposition.RETRIED,
         requests=(("CaseCloseRequested", {"case_id": CASE, "outcome": "violation",
                                           "penalty_cents": 400_000}),)),
    Case(state=cr.AWAITING_CLOSE, trigger=DEADLINE, attempts=3, to=cr.MANUAL_REVIEW,
         requests=(("SagaManualReviewRequired", {
             "case_id": CASE, "reason": "case close not confirmed after retries"}),)),
    Case(state=cr.COMPENSATING, trigger="CaseReturned", payload={"reason": "x"},
         to=cr.COMPENSATED,
         requests=(("SagaCompensated", {"case_id": CASE,
                                        "reason": "decision engine rejected the case: test"}),)),
    Case(state=cr.COMPENSATING, trigger=DEADLINE, attempts=2, to=cr.COMPENSATING,
         disposition=Disposition.RETRIED,
         requests=(("CaseReturnRequested", {"case_id": CASE,
                                            "reason": "decision engine rejected the case: test"}),)),
    Case(state=cr.COMPENSATING, trigger=DEADLINE, attempts=3, to=cr.COMPENSATION_FAILED,
         requests=(("SagaCompensationFailed", {
             "case_id": CASE, "reason": "case return not confirmed after retries"}),)),
    Case(state=cr.MANUAL_REVIEW, trigger=RESOLVE, payload={"reason": "notice sent by post"},
         to=cr.AWAITING_CLOSE,
         requests=(("SagaResolved", {"case_id": CASE, "resolution": "close",
                                     "reason": "notice sent by post"}),
                   ("CaseCloseRequested", {"case_id": CASE, "outcome": "violation",
                                           "penalty_cents": 400_000}),)),
]


def run(case: Case):
    saga = given(case.state, attempts=case.attempts)
    if case.trigger == DEADLINE:
        assert saga.deadline_at is not None
        return saga, fire_deadline(CASE_REVIEW, saga, now=saga.deadline_at)
    if case.trigger == RESOLVE:
        return saga, resolve(CASE_REVIEW, saga, input=case.payload, now=T0)
    return saga, apply_event(CASE_REVIEW, saga, event_type=case.trigger, payload=case.payload,
                             event_id="evt-9", now=T0)


@pytest.mark.parametrize("case", CASES, ids=Case.id)
def test_transition(case: Case) -> None:
    before, out = run(case)
    assert out.saga.state == case.to
    assert out.history.disposition is case.disposition
    assert [(e.event_type, dict(e.payload)) for e in out.emissions] == list(case.requests)
    # aggregate versions continue the saga's sequence without gaps
    assert [e.aggregate_version for e in out.emissions] == \
        list(range(before.event_seq + 1, before.event_seq + 1 + len(case.requests)))
    assert out.saga.event_seq == before.event_seq + len(case.requests)
    target = CASE_REVIEW.state(case.to)
    if target.step is None:
        assert (out.saga.step, out.saga.attempts, out.saga.deadline_at) == (None, 0, None)
    else:
        step = CASE_REVIEW.step(target.step)
        assert out.saga.step == step.name
        expected_attempts = case.attempts + 1 if case.disposition is Disposition.RETRIED else 1
        assert out.saga.attempts == expected_attempts
        assert out.saga.deadline_at is not None and step.deadline is not None
        assert out.saga.deadline_at > out.history.at


def test_every_transition_is_covered() -> None:
    covered = {(c.state, c.trigger) for c in CASES if c.disposition is Disposition.TRANSITIONED}
    declared = {(t.source, t.on) for t in CASE_REVIEW.transitions}
    assert declared == covered


def test_start_issues_the_decision_request_with_a_deadline() -> None:
    out = start_saga(CASE_REVIEW, saga_id=SAGA, case_id=CASE, tenant_id="t1", correlation_id=CASE,
                     facts=SUBMITTED, event_id="submit-1", now=T0)
    assert out.history.disposition is Disposition.STARTED
    assert out.saga.state == cr.AWAITING_DECISION
    assert dict(out.saga.data) == BASE_DATA
    assert [(e.event_type, dict(e.payload), e.aggregate_version) for e in out.emissions] == [
        ("DecisionRequested", {"case_id": CASE, "severity": 4, "evidence_count": 2,
                               "title": "Leaky tank"}, 1)]
    assert out.saga.deadline_at == T0 + timedelta(minutes=5)
    assert (out.saga.attempts, out.saga.last_event_id) == (1, "submit-1")


def test_start_without_a_required_field_fails_loudly() -> None:
    facts = {k: v for k, v in SUBMITTED.items() if k != "reporter_email"}
    with pytest.raises(KeyError, match="reporter_email"):
        start_saga(CASE_REVIEW, saga_id=SAGA, case_id=CASE, tenant_id="t1", correlation_id=CASE,
                   facts=facts, event_id="submit-1", now=T0)


@pytest.mark.parametrize("state,trigger", [
    (cr.COMPLETED, "NoticeIssued"),  # duplicate reply after completion
    (cr.AWAITING_CLOSE, "ViolationDetermined"),  # second decision for the same saga
    (cr.AWAITING_NOTICE, "CaseClosed"),  # out of place
    (cr.MANUAL_REVIEW, "NoticeIssued"),  # late notice after the notice deadline fired
])
def test_replies_not_whitelisted_are_ignored_and_change_nothing(state: str, trigger: str) -> None:
    saga = given(state)
    out = apply_event(CASE_REVIEW, saga, event_type=trigger,
                      payload={"case_id": CASE, "saga_id": SAGA, "violation_code": "REG-4",
                               "penalty_cents": 1, "message_id": "m", "outcome": "violation"},
                      event_id="late-1", now=T0)
    assert out.saga is saga
    assert out.emissions == ()
    assert out.history.disposition is Disposition.IGNORED
    assert out.history.event_id == "late-1" and state in out.history.note
    assert not out.changed


@pytest.mark.parametrize("state,trigger", [
    (cr.COMPENSATING, "ViolationDetermined"),  # late success after the decision deadline fired
    (cr.COMPENSATED, "NoViolationFound"),  # ... or after the compensation finished
    (cr.COMPENSATION_FAILED, "ViolationDetermined"),
])
def test_late_success_after_compensation_began_is_recorded_as_late(state: str,
                                                                  trigger: str) -> None:
    saga = given(state, data=RETURN_DATA)
    out = apply_event(CASE_REVIEW, saga, event_type=trigger,
                      payload={"case_id": CASE, "saga_id": SAGA, "violation_code": "REG-4",
                               "penalty_cents": 1},
                      event_id="late-1", now=T0)
    assert out.saga is saga and out.emissions == ()
    assert out.history.disposition is Disposition.LATE
    assert "compensation" in out.history.note and not out.changed


def test_compensation_confirmed_after_the_saga_gave_up_is_recorded_as_late() -> None:
    saga = given(cr.COMPENSATION_FAILED, data=RETURN_DATA)
    out = apply_event(CASE_REVIEW, saga, event_type="CaseReturned", payload={"reason": "x"},
                      event_id="late-2", now=T0)
    assert out.history.disposition is Disposition.LATE and not out.changed
    assert "gave up" in out.history.note
    dup = apply_event(CASE_REVIEW, given(cr.COMPENSATED), event_type="CaseReturned",
                      payload={"reason": "x"}, event_id="dup-2", now=T0)
    assert dup.history.disposition is Disposition.IGNORED  # already compensated: a duplicate


def test_late_reply_after_completion_is_labelled_as_such() -> None:
    out = apply_event(CASE_REVIEW, given(cr.COMPLETED), event_type="CaseClosed", payload={},
                      event_id="dup", now=T0)
    assert "already finished" in out.history.note


def test_deadline_not_yet_due_is_ignored() -> None:
    saga = given(cr.AWAITING_DECISION)
    assert saga.deadline_at is not None
    out = fire_deadline(CASE_REVIEW, saga, now=saga.deadline_at - timedelta(microseconds=1))
    assert out.saga is saga and out.emissions == ()
    assert out.history.disposition is Disposition.IGNORED


def test_deadline_on_a_finished_saga_is_ignored() -> None:
    saga = given(cr.COMPLETED)
    out = fire_deadline(CASE_REVIEW, saga, now=T0 + timedelta(days=1))
    assert not out.changed


def test_resolve_outside_manual_review_is_refused() -> None:
    with pytest.raises(UnknownTrigger, match="AWAITING_DECISION"):
        resolve(CASE_REVIEW, given(cr.AWAITING_DECISION), input={"reason": "x"}, now=T0)


def test_resolve_records_the_operator_reason() -> None:
    out = resolve(CASE_REVIEW, given(cr.MANUAL_REVIEW), input={"reason": "called the owner"},
                  now=T0)
    assert out.saga.data["resolution_reason"] == "called the owner"
    assert out.saga.data["resolution"] == "close"
    assert out.history.note == "called the owner"


def test_retries_are_bounded_then_the_deadline_transition_is_taken() -> None:
    """Walk the compensation's deadlines: 3 issues in total, then COMPENSATION_FAILED."""
    saga = given(cr.COMPENSATING)
    issued = 1
    for _ in range(10):
        assert saga.deadline_at is not None
        out = fire_deadline(CASE_REVIEW, saga, now=saga.deadline_at)
        saga = out.saga
        if saga.state != cr.COMPENSATING:
            break
        issued += len(out.emissions)
    assert saga.state == cr.COMPENSATION_FAILED
    assert issued == 3
    assert saga.deadline_at is None
    assert "failure" in saga.data


def test_whole_violation_journey_numbers_events_consecutively() -> None:
    out = start_saga(CASE_REVIEW, saga_id=SAGA, case_id=CASE, tenant_id="t1", correlation_id=CASE,
                     facts=SUBMITTED, event_id="e0", now=T0)
    emitted = list(out.emissions)
    saga = out.saga
    for trigger, payload in [
        ("ViolationDetermined", {"violation_code": "REG-4", "penalty_cents": 400_000}),
        ("NoticeIssued", {"message_id": "<n@x>"}),
        ("CaseClosed", {}),
    ]:
        out = apply_event(CASE_REVIEW, saga, event_type=trigger, payload=payload,
                          event_id=f"e-{trigger}", now=T0)
        emitted += out.emissions
        saga = out.saga
    assert saga.state == cr.COMPLETED
    assert [e.event_type for e in emitted] == ["DecisionRequested", "NoticeRequested",
                                               "CaseCloseRequested", "SagaCompleted"]
    assert [e.aggregate_version for e in emitted] == [1, 2, 3, 4]
    assert saga.last_event_id == "e-CaseClosed"


REPLY_CASES = [c for c in CASES if c.trigger not in (DEADLINE, RESOLVE)
               and c.disposition is Disposition.TRANSITIONED]
"""Every transition a participant's reply drives (not deadlines, not the operator)."""


@pytest.mark.parametrize("attempts", [1, 2])
@pytest.mark.parametrize("case", REPLY_CASES, ids=Case.id)
def test_same_reply_twice_with_different_event_ids_transitions_once(case: Case,
                                                                    attempts: int) -> None:
    """Given a saga awaiting a step (attempt 1, or a re-issued attempt 2 of the same
    request), when the participant emits its reply twice as two distinct events (new event
    id, same saga, same step, same payload: the inbox cannot tell them apart), expect one
    transition with its requests, then an IGNORED no-op: same saga object, no emission, no
    new deadline, recorded under the second event id."""
    saga = given(case.state, attempts=attempts)
    first = apply_event(CASE_REVIEW, saga, event_type=case.trigger, payload=case.payload,
                        event_id="reply-1", now=T0)
    assert first.history.disposition is Disposition.TRANSITIONED
    assert first.saga.state == case.to
    assert [e.event_type for e in first.emissions] == [r[0] for r in case.requests]
    again = apply_event(CASE_REVIEW, first.saga, event_type=case.trigger, payload=case.payload,
                        event_id="reply-2", now=T0 + timedelta(seconds=1))
    assert again.saga is first.saga
    assert again.emissions == ()
    assert not again.changed
    assert again.history.disposition is Disposition.IGNORED
    assert (again.history.event_id, again.history.from_state, again.history.to_state) == (
        "reply-2", case.to, case.to)
