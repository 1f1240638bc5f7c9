"""The appeal saga, declared as data: a second saga of a case, started by its
``AppealSubmitted`` (event contract: ``schemas/``).

::

    AppealSubmitted ─▶ AWAITING_APPEAL_DECISION ──AppealUpheld──▶ AWAITING_CORRECTION ──CorrectionNoticeIssued──▶ AWAITING_CLOSE ──CaseClosed──▶ COMPLETED
                          │  │                                     └──NoticeFailed / @deadline──▶ MANUAL_REVIEW           ▲
                          │  └──AppealRejected──▶ AWAITING_REJECTION_NOTICE ──AppealRejectionNoticeSent──────────────────┘
                          │                          └──NoticeFailed / @deadline──▶ MANUAL_REVIEW
                          └──@deadline──▶ MANUAL_REVIEW

The case service puts the case in ``appealed`` when it records ``AppealSubmitted``: that
reopens the review. This saga then:

- ``decide_appeal`` (AppealDecisionRequested): the decision service rules on the appeal
  (a deterministic rule, :mod:`services.decision.domain.appeal`) and answers
  ``AppealUpheld`` (with the corrected penalty) or ``AppealRejected``. Deadline
  ``decision_deadline``, issued once; no answer -> MANUAL_REVIEW with the first decision
  standing (outcome ``violation``) until an operator resolves it (nothing to undo: the
  appeal itself stays on record).
- upheld: ``correct`` (CorrectionNoticeRequested) — the correction path: the notification
  service renders a correction notice PDF and mails it (``CorrectionNoticeIssued`` with
  its SHA-256). A pivot like the first notice: a sent mail cannot be un-sent, so a
  failure parks the saga in MANUAL_REVIEW. The original ``NoticeIssued`` stays in the
  audit trail: a correction is a new fact, never a deletion.
- rejected: ``tell_rejection`` (AppealRejectionNoticeRequested): the party is told by mail
  (``AppealRejectionNoticeSent``).
- ``close`` (CaseCloseRequested, retriable): the case closes again with the appeal's
  outcome — ``no_violation`` when upheld (the penalty is withdrawn), the original
  ``violation`` and penalty when rejected.

Links: the saga's data keeps ``original_saga_id`` (the case-review saga this appeal
follows, from the orchestrator's ``previous_saga_id`` fact); the first request's causation
id is the ``AppealSubmitted`` event id, and every later event's causation id is the event
that moved the saga, so the chain of causation leads back to the appeal.
"""

from __future__ import annotations

from datetime import timedelta

from services.saga.domain.definition import (
    DEADLINE,
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
from services.saga.domain.case_review import resolve_to_close

AWAITING_APPEAL_DECISION = "AWAITING_APPEAL_DECISION"
AWAITING_CORRECTION = "AWAITING_CORRECTION"
AWAITING_REJECTION_NOTICE = "AWAITING_REJECTION_NOTICE"
AWAITING_CLOSE = "AWAITING_CLOSE"
COMPLETED = "COMPLETED"
MANUAL_REVIEW = "MANUAL_REVIEW"


def appeal_saga(*, decision_deadline: timedelta = timedelta(minutes=5),
                notice_deadline: timedelta = timedelta(minutes=15),
                close_deadline: timedelta = timedelta(minutes=2),
                close_attempts: int = 3) -> SagaDefinition:
    """Build (and validate) the appeal saga with the given deadlines.

    Args:
        decision_deadline: wait for the appeal decision.
        notice_deadline: wait for the correction / rejection mail's outcome.
        close_deadline, close_attempts: the close step's re-issue period and issues in total.

    Raises:
        DefinitionError: the declaration is inconsistent (a bug, caught at start-up).
    """
    steps = (
        Step(name="decide_appeal", kind=StepKind.PIVOT,
             action=Request(event_type="AppealDecisionRequested",
                            payload=fields("case_id", "reason", "penalty_cents")),
             deadline=decision_deadline),
        Step(name="correct", kind=StepKind.PIVOT,
             action=Request(event_type="CorrectionNoticeRequested",
                            payload=fields("case_id", "recipient_email", "penalty_cents",
                                           reason="decision_reason")),
             deadline=notice_deadline),
        Step(name="tell_rejection", kind=StepKind.PIVOT,
             action=Request(event_type="AppealRejectionNoticeRequested",
                            payload=fields("case_id", "recipient_email",
                                           reason="decision_reason")),
             deadline=notice_deadline),
        Step(name="close", kind=StepKind.RETRIABLE,
             action=Request(event_type="CaseCloseRequested",
                            payload=fields("case_id", "outcome", "penalty_cents")),
             deadline=close_deadline, retry=RetryPolicy(max_attempts=close_attempts)),
    )
    states = (
        State(name=AWAITING_APPEAL_DECISION, step="decide_appeal"),
        State(name=AWAITING_CORRECTION, step="correct"),
        State(name=AWAITING_REJECTION_NOTICE, step="tell_rejection"),
        State(name=AWAITING_CLOSE, step="close"),
        State(name=COMPLETED, kind=StateKind.TERMINAL,
              emits=(Request(event_type="SagaCompleted", payload=fields("case_id", "outcome")),)),
        State(name=MANUAL_REVIEW, kind=StateKind.PARKED,
              emits=(Request(event_type="SagaManualReviewRequired",
                             payload=fields("case_id", reason="review_reason")),)),
    )
    transitions = (
        Transition(source=AWAITING_APPEAL_DECISION, on="AppealUpheld", target=AWAITING_CORRECTION,
                   record=fields("penalty_cents", decision_reason="reason"),
                   assign={"outcome": "no_violation", "appeal": "upheld"}),
        Transition(source=AWAITING_APPEAL_DECISION, on="AppealRejected",
                   target=AWAITING_REJECTION_NOTICE, record=fields(decision_reason="reason"),
                   assign={"outcome": "violation", "appeal": "rejected"}),
        Transition(source=AWAITING_APPEAL_DECISION, on=DEADLINE, target=MANUAL_REVIEW,
                   # the first decision stands until the operator resolves the appeal
                   assign={"outcome": "violation",
                           "review_reason": "no appeal decision before the decision deadline"}),
        Transition(source=AWAITING_CORRECTION, on="CorrectionNoticeIssued", target=AWAITING_CLOSE,
                   record=fields("message_id", "document_sha256")),
        Transition(source=AWAITING_CORRECTION, on="NoticeFailed", target=MANUAL_REVIEW,
                   record=fields(review_reason="reason")),
        Transition(source=AWAITING_CORRECTION, on=DEADLINE, target=MANUAL_REVIEW,
                   assign={"review_reason": "no correction notice outcome before the deadline"}),
        Transition(source=AWAITING_REJECTION_NOTICE, on="AppealRejectionNoticeSent",
                   target=AWAITING_CLOSE, record=fields("message_id")),
        Transition(source=AWAITING_REJECTION_NOTICE, on="NoticeFailed", target=MANUAL_REVIEW,
                   record=fields(review_reason="reason")),
        Transition(source=AWAITING_REJECTION_NOTICE, on=DEADLINE, target=MANUAL_REVIEW,
                   assign={"review_reason": "no rejection mail outcome before the deadline"}),
        Transition(source=AWAITING_CLOSE, on="CaseClosed", target=COMPLETED),
        Transition(source=AWAITING_CLOSE, on=DEADLINE, target=MANUAL_REVIEW,
                   assign={"review_reason": "case close not confirmed after retries"}),
        resolve_to_close(MANUAL_REVIEW, AWAITING_CLOSE),
    )
    return SagaDefinition(
        name="appeal",
        start_on="AppealSubmitted",
        start_record=fields("reason", "penalty_cents", case_id="aggregate_id",
                            recipient_email="reporter_email",
                            original_saga_id="previous_saga_id"),
        initial=AWAITING_APPEAL_DECISION,
        states=states,
        steps=steps,
        transitions=transitions,
    ).validate()


APPEAL = appeal_saga()
"""The appeal saga with default deadlines (services build theirs from settings)."""
