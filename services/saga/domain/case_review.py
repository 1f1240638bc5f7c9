"""The case-review saga, declared as data (event contract: ``schemas/``).

::

    CaseSubmitted ─▶ AWAITING_DECISION ──ViolationDetermined──▶ AWAITING_NOTICE ──NoticeIssued──▶ AWAITING_CLOSE ──CaseClosed──▶ COMPLETED
                       │  │                                      │   │                           │  ▲
                       │  └──NoViolationFound────────────────────┼───┼──────────────────────────▶┘  │ @resolve
                       │                                         │   └──NoticeFailed / @deadline──▶ MANUAL_REVIEW
                       └──DecisionFailed / @deadline──▶ COMPENSATING ──CaseReturned──▶ COMPENSATED      ▲
                                                          └──@deadline (retries used up)──▶ COMPENSATION_FAILED
                                           AWAITING_CLOSE ──@deadline (retries used up)──────────────────┘

Steps and what undoes them:

- ``decide`` (DecisionRequested): compensable — undone by ``return_case`` (the case goes
  back to its owner with the reason). Deadline ``decision_deadline``, issued once: a late
  decision after the deadline fired is ignored (the saga is already compensating).
- ``notify`` (NoticeRequested): the pivot — a notice cannot be un-sent, so a failure goes
  to MANUAL_REVIEW (a notice can only be corrected by a person), never to compensation.
  The notification service retries SMTP itself (bounded) before it reports NoticeFailed.
- ``close`` (CaseCloseRequested): retriable — re-issued on its deadline up to
  ``close_attempts`` times (the case service closes idempotently), then MANUAL_REVIEW.
- ``return_case`` (CaseReturnRequested): the compensation, retriable — re-issued up to
  ``return_attempts`` times, then COMPENSATION_FAILED (an alert), never stuck in
  COMPENSATING.

MANUAL_REVIEW is parked: an operator resolves it (``@resolve`` with a reason), which asks
the case service to close the case with the recorded outcome.

Every transition is an event on ``outbox.event.saga`` (so the audit journal sees it): the
requests above, ``SagaCompleted`` / ``SagaCompensated`` on the happy and compensated ends,
``SagaManualReviewRequired {case_id, reason}`` on entering MANUAL_REVIEW,
``SagaResolved {case_id, resolution, reason}`` when an operator resolves it (resolution
``close``), and ``SagaCompensationFailed {case_id, reason}`` on COMPENSATION_FAILED (an
alerting state: logged at ERROR and counted by the orchestrator). A decision that arrives
after compensation began is recorded as *late*; the case return already issued undoes it.
A CaseReturned arriving after the saga gave up (COMPENSATION_FAILED) is recorded as *late*
too, so the operator handling the alert sees that the case was returned after all.
"""

from __future__ import annotations

from datetime import timedelta

from services.saga.domain.definition import (
    DEADLINE,
    RESOLVE,
    Request,
    RetryPolicy,
    SagaDefinition,
    State,
    StateKind,
    Step,
    StepKind,
    Transition,
    fields,
)

AWAITING_DECISION = "AWAITING_DECISION"
AWAITING_NOTICE = "AWAITING_NOTICE"
AWAITING_CLOSE = "AWAITING_CLOSE"
COMPENSATING = "COMPENSATING"
COMPLETED = "COMPLETED"
COMPENSATED = "COMPENSATED"
COMPENSATION_FAILED = "COMPENSATION_FAILED"
MANUAL_REVIEW = "MANUAL_REVIEW"


def resolve_to_close(manual_review: str, awaiting_close: str) -> Transition:
    """An operator's resolve of a parked saga: record the reason, announce ``SagaResolved``
    (case id, resolution ``close``, reason) and go on to closing the case."""
    return Transition(source=manual_review, on=RESOLVE, target=awaiting_close,
                      record=fields(resolution_reason="reason"), assign={"resolution": "close"},
                      emits=(Request(event_type="SagaResolved",
                                     payload=fields("case_id", "resolution",
                                                    reason="resolution_reason")),))


def case_review_saga(*, decision_deadline: timedelta = timedelta(minutes=5),
                     notice_deadline: timedelta = timedelta(minutes=15),
                     close_deadline: timedelta = timedelta(minutes=2), close_attempts: int = 3,
                     return_deadline: timedelta = timedelta(minutes=2),
                     return_attempts: int = 3,
                     decision_request_fields: tuple[str, ...] = (
                         "case_id", "severity", "evidence_count", "title"),
                     ) -> SagaDefinition:
    """Build (and validate) the case-review saga with the given deadlines.

    Args:
        *_deadline: how long each step waits for its reply.
        close_attempts, return_attempts: issues in total of the retriable steps.
        decision_request_fields: payload of DecisionRequested (the catalog's fields).

    Raises:
        DefinitionError: the declaration is inconsistent (a bug, caught at start-up).
    """
    steps = (
        Step(name="decide", kind=StepKind.COMPENSABLE, compensation="return_case",
             action=Request(event_type="DecisionRequested",
                            payload=fields(*decision_request_fields)),
             deadline=decision_deadline),
        Step(name="notify", kind=StepKind.PIVOT,
             action=Request(event_type="NoticeRequested",
                            payload=fields("case_id", "recipient_email", "penalty_cents",
                                           "violation_code")),
             deadline=notice_deadline),
        Step(name="close", kind=StepKind.RETRIABLE,
             action=Request(event_type="CaseCloseRequested",
                            payload=fields("case_id", "outcome", "penalty_cents")),
             deadline=close_deadline, retry=RetryPolicy(max_attempts=close_attempts)),
        Step(name="return_case", kind=StepKind.RETRIABLE,
             action=Request(event_type="CaseReturnRequested", payload=fields("case_id", "reason")),
             deadline=return_deadline, retry=RetryPolicy(max_attempts=return_attempts)),
    )
    states = (
        State(name=AWAITING_DECISION, step="decide"),
        State(name=AWAITING_NOTICE, step="notify"),
        State(name=AWAITING_CLOSE, step="close"),
        State(name=COMPENSATING, step="return_case"),
        State(name=COMPLETED, kind=StateKind.TERMINAL,
              emits=(Request(event_type="SagaCompleted", payload=fields("case_id", "outcome")),)),
        State(name=COMPENSATED, kind=StateKind.TERMINAL,
              emits=(Request(event_type="SagaCompensated", payload=fields("case_id", "reason")),)),
        State(name=COMPENSATION_FAILED, kind=StateKind.TERMINAL, alert=True,
              emits=(Request(event_type="SagaCompensationFailed",
                             payload=fields("case_id", reason="failure")),)),
        State(name=MANUAL_REVIEW, kind=StateKind.PARKED,
              emits=(Request(event_type="SagaManualReviewRequired",
                             payload=fields("case_id", reason="review_reason")),)),
    )
    transitions = (
        Transition(source=AWAITING_DECISION, on="ViolationDetermined", target=AWAITING_NOTICE,
                   record=fields("violation_code", "penalty_cents"),
                   assign={"outcome": "violation"}),
        Transition(source=AWAITING_DECISION, on="NoViolationFound", target=AWAITING_CLOSE,
                   assign={"outcome": "no_violation", "penalty_cents": None}),
        Transition(source=AWAITING_DECISION, on="DecisionFailed", target=COMPENSATING,
                   record=fields("reason")),
        Transition(source=AWAITING_DECISION, on=DEADLINE, target=COMPENSATING,
                   assign={"reason": "no decision before the decision deadline"}),
        Transition(source=AWAITING_NOTICE, on="NoticeIssued", target=AWAITING_CLOSE,
                   record=fields("message_id")),
        Transition(source=AWAITING_NOTICE, on="NoticeFailed", target=MANUAL_REVIEW,
                   record=fields(review_reason="reason")),
        Transition(source=AWAITING_NOTICE, on=DEADLINE, target=MANUAL_REVIEW,
                   assign={"review_reason": "no notice outcome before the notice deadline"}),
        Transition(source=AWAITING_CLOSE, on="CaseClosed", target=COMPLETED),
        Transition(source=AWAITING_CLOSE, on=DEADLINE, target=MANUAL_REVIEW,
                   assign={"review_reason": "case close not confirmed after retries"}),
        Transition(source=COMPENSATING, on="CaseReturned", target=COMPENSATED),
        Transition(source=COMPENSATING, on=DEADLINE, target=COMPENSATION_FAILED,
                   assign={"failure": "case return not confirmed after retries"}),
        resolve_to_close(MANUAL_REVIEW, AWAITING_CLOSE),
    )
    return SagaDefinition(
        name="case-review",
        start_on="CaseSubmitted",
        start_record=fields("title", "severity", "evidence_count", case_id="aggregate_id",
                            recipient_email="reporter_email"),
        initial=AWAITING_DECISION,
        states=states,
        steps=steps,
        transitions=transitions,
    ).validate()


CASE_REVIEW = case_review_saga()
"""The case-review saga with default deadlines (services build theirs from settings)."""
