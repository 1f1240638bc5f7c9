"""The notice-correction saga, declared as data: a supervisor's correction of a sent
notice, started by the case's ``NoticeCorrectionOrdered`` (event contract: ``schemas/``).

::

    NoticeCorrectionOrdered ─▶ AWAITING_CORRECTION ──CorrectionNoticeIssued──▶ COMPLETED
                                  └──NoticeFailed / @deadline──▶ MANUAL_REVIEW ──@resolve──▶ COMPLETED

One step, ``correct`` (CorrectionNoticeRequested) — the same correction path as an upheld
appeal (:mod:`.appeal`): the notification service renders the correction notice PDF and
mails it (``CorrectionNoticeIssued`` with its SHA-256), once per case — a later order is
answered with the correction already sent, never a second mail. A pivot: a failure parks the
saga in MANUAL_REVIEW; an operator's resolve records that the correction was handled outside
(``SagaResolved``). The sent notice and its ``NoticeIssued`` stay on record. The saga's data
keeps ``original_saga_id`` (the case's newest earlier saga); the request's causation id is
the ``NoticeCorrectionOrdered`` event id.
"""

from __future__ import annotations

from datetime import timedelta

from services.saga.domain.definition import (
    DEADLINE,
    RESOLVE,
    Request,
    SagaDefinition,
    State,
    StateKind,
    Step,
    StepKind,
    Transition,
    fields,
)

AWAITING_CORRECTION = "AWAITING_CORRECTION"
COMPLETED = "COMPLETED"
MANUAL_REVIEW = "MANUAL_REVIEW"


def notice_correction_saga(*, notice_deadline: timedelta = timedelta(minutes=15)) -> SagaDefinition:
    """Build (and validate) the notice-correction saga.

    Args:
        notice_deadline: wait for the correction notice's outcome.

    Raises:
        DefinitionError: the declaration is inconsistent (a bug, caught at start-up).
    """
    return SagaDefinition(
        name="notice-correction",
        start_on="NoticeCorrectionOrdered",
        start_record=fields("reason", "penalty_cents", case_id="aggregate_id",
                            recipient_email="reporter_email",
                            original_saga_id="previous_saga_id"),
        initial=AWAITING_CORRECTION,
        states=(
            State(name=AWAITING_CORRECTION, step="correct"),
            State(name=COMPLETED, kind=StateKind.TERMINAL,
                  emits=(Request(event_type="SagaCompleted",
                                 payload=fields("case_id", "outcome")),)),
            State(name=MANUAL_REVIEW, kind=StateKind.PARKED,
                  emits=(Request(event_type="SagaManualReviewRequired",
                                 payload=fields("case_id", reason="review_reason")),)),
        ),
        steps=(
            Step(name="correct", kind=StepKind.PIVOT,
                 action=Request(event_type="CorrectionNoticeRequested",
                                payload=fields("case_id", "recipient_email", "penalty_cents",
                                               "reason")),
                 deadline=notice_deadline),
        ),
        transitions=(
            Transition(source=AWAITING_CORRECTION, on="CorrectionNoticeIssued", target=COMPLETED,
                       record=fields("message_id", "document_sha256"),
                       assign={"outcome": "corrected"}),
            Transition(source=AWAITING_CORRECTION, on="NoticeFailed", target=MANUAL_REVIEW,
                       record=fields(review_reason="reason")),
            Transition(source=AWAITING_CORRECTION, on=DEADLINE, target=MANUAL_REVIEW,
                       assign={"review_reason": "no correction notice outcome before the deadline"}),
            Transition(source=MANUAL_REVIEW, on=RESOLVE, target=COMPLETED,
                       record=fields(resolution_reason="reason"),
                       assign={"resolution": "corrected_outside", "outcome": "corrected"},
                       emits=(Request(event_type="SagaResolved",
                                      payload=fields("case_id", "resolution",
                                                     reason="resolution_reason")),)),
        ),
    ).validate()


NOTICE_CORRECTION = notice_correction_saga()
"""The notice-correction saga with the default deadline."""
