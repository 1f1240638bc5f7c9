"""The case aggregate: its state, its lifecycle rules, and the events it records.

Lifecycle: the transitions of ``services.case.domain.workflow`` (``TRANSITIONS``); a
refused action raises :class:`InvalidTransition` naming the rule. A returned case is not
resubmitted in this version; a closed case with a violation may be appealed once, within
``APPEAL_WINDOW``, and is closed again by the appeal's decision.

Each change increments ``version`` by one and records one past-tense event; the
repository saves the state with ``WHERE version = <version it loaded>`` (optimistic
concurrency). Repeating a close or return that already happened identically is a no-op
(no event): the saga may ask twice, the case records it once. Assigning the officer already
assigned is a no-op too (the fact "case X is assigned to officer Y" is recorded once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from services.case.domain.errors import CaseValidationError, InvalidTransition
from services.case.domain.events import (
    AppealSubmitted,
    CaseAssigned,
    CaseClosed,
    CaseEscalated,
    CaseEvent,
    CaseOpened,
    CaseReturned,
    CaseSubmitted,
    CaseWithdrawn,
    EvidenceOverdue,
    NoticeCorrectionOrdered,
    EvidenceRequested,
    EvidenceSubmitted,
    ReviewStarted,
)
from services.case.domain.values import (
    DESCRIPTION_MAX,
    EVIDENCE_NAME_MAX,
    MEDIA_TYPE_MAX,
    OFFICER_MAX,
    CaseContent,
    CaseStatus,
    Outcome,
    Resolution,
    check_note,
    check_reason,
    check_text,
)
from services.case.domain.workflow import APPEAL_WINDOW, EVIDENCE_MAX_BYTES, Action, rule_for


class _EventMeta(TypedDict):
    case_id: str
    tenant_id: str
    version: int
    occurred_at: datetime
    actor_id: str


@dataclass(slots=True, kw_only=True)
class Case:
    """A regulatory case owned by one tenant.

    Build a new one with :meth:`open`; rebuild a stored one with the constructor (the
    repository does that, with no pending events). ``loaded_version`` is the version the
    case had when loaded (0 for a new case): the repository's optimistic check.
    """

    id: str
    tenant_id: str
    content: CaseContent
    status: CaseStatus
    version: int
    opened_by: str
    opened_at: datetime
    updated_at: datetime
    submitted_by: str | None = None
    submitted_at: datetime | None = None
    note: str | None = None
    resolution: Resolution | None = None
    resolved_at: datetime | None = None
    officer_id: str | None = None
    evidence_status: str = "none"  # none | requested | overdue | submitted
    evidence_request_id: str | None = None
    evidence_description: str | None = None
    evidence_due_at: datetime | None = None
    evidence_escalate_at: datetime | None = None
    review_started_at: datetime | None = None
    withdraw_reason: str | None = None
    appeal_reason: str | None = None
    appealed_at: datetime | None = None
    loaded_version: int = -1
    _pending: list[CaseEvent] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.loaded_version == -1:
            self.loaded_version = self.version

    # --- commands -------------------------------------------------------------------

    @classmethod
    def open(
        cls, *, case_id: str, tenant_id: str, content: CaseContent, actor_id: str, at: datetime
    ) -> Case:
        """Open a case at version 1, recording :class:`CaseOpened`."""
        if not tenant_id:
            raise CaseValidationError("tenant_id", "must not be empty")
        case = cls(id=case_id, tenant_id=tenant_id, content=content, status=CaseStatus.OPEN,
                   version=0, opened_by=actor_id, opened_at=at, updated_at=at, loaded_version=0)
        case._record(CaseOpened(**case._meta(actor_id, at), content=content))
        return case

    def submit(self, *, actor_id: str, at: datetime, note: str | None = None) -> None:
        """Submit an open case for decision, recording :class:`CaseSubmitted`.

        Raises:
            InvalidTransition: the case is not OPEN or UNDER_REVIEW.
            CaseValidationError: the note is longer than 1000 characters.
        """
        self._require(Action.SUBMIT)
        note = check_note(note)
        self.status = CaseStatus.SUBMITTED
        self.submitted_by, self.submitted_at, self.note = actor_id, at, note
        self._record(CaseSubmitted(**self._meta(actor_id, at), content=self.content, note=note))

    def close(self, *, outcome: str, penalty_cents: int | None, actor_id: str, at: datetime) -> bool:
        """Close a submitted case with a decision, recording :class:`CaseClosed`.

        Returns:
            True if the case changed, False if it was already closed identically (no event).
        Raises:
            InvalidTransition: the case is neither SUBMITTED nor APPEALED (nor CLOSED
                identically).
            CaseValidationError: bad outcome / penalty combination (see ``Resolution.closed``).
        """
        resolution = Resolution.closed(outcome, penalty_cents)
        if self.status is CaseStatus.CLOSED and self.resolution == resolution:
            return False
        self._require(Action.CLOSE)
        self._resolve(CaseStatus.CLOSED, resolution, at)
        assert resolution.outcome is not None
        self._record(CaseClosed(**self._meta(actor_id, at), outcome=resolution.outcome,
                                penalty_cents=resolution.penalty_cents))
        return True

    def return_(self, *, reason: str, actor_id: str, at: datetime) -> bool:
        """Return a submitted case (compensation), recording :class:`CaseReturned`.

        Returns:
            True if the case changed, False if it was already returned (no event).
        Raises:
            InvalidTransition: the case is OPEN or CLOSED.
            CaseValidationError: empty or over-long reason.
        """
        resolution = Resolution.returned(reason)
        if self.status is CaseStatus.RETURNED:
            return False
        self._require(Action.RETURN)
        self._resolve(CaseStatus.RETURNED, resolution, at)
        assert resolution.reason is not None
        self._record(CaseReturned(**self._meta(actor_id, at), reason=resolution.reason))
        return True

    def assign(self, *, officer_id: str, actor_id: str, at: datetime) -> bool:
        """Make ``officer_id`` responsible, recording :class:`CaseAssigned`.

        Returns:
            True if the officer changed, False if ``officer_id`` was already assigned (no event).
        Raises:
            InvalidTransition: the case is closed, returned or withdrawn.
            CaseValidationError: empty or over-long ``officer_id``.
        """
        officer_id = check_text("officer_id", officer_id, OFFICER_MAX)
        self._require(Action.ASSIGN)
        if officer_id == self.officer_id:
            return False
        previous, self.officer_id = self.officer_id, officer_id
        self._record(CaseAssigned(**self._meta(actor_id, at), officer_id=officer_id,
                                  previous_officer_id=previous))
        return True

    def request_evidence(self, *, request_id: str, description: str, due_at: datetime,
                         actor_id: str, at: datetime) -> None:
        """Ask for evidence due by ``due_at``, recording :class:`EvidenceRequested`.

        Raises:
            InvalidTransition: the case is not OPEN or UNDER_REVIEW.
            CaseValidationError: empty/over-long description, or ``due_at`` without a time
                zone. A ``due_at`` already passed is accepted: the evidence is overdue at
                once (the deadline worker reminds at its next scan).
        """
        description = check_text("description", description, DESCRIPTION_MAX)
        if due_at.tzinfo is None:
            raise CaseValidationError("due_at", "must carry a time zone")
        self._require(Action.REQUEST_EVIDENCE)
        self.status = CaseStatus.AWAITING_EVIDENCE
        self.evidence_status, self.evidence_request_id = "requested", request_id
        self.evidence_description, self.evidence_due_at = description, due_at
        self._record(EvidenceRequested(**self._meta(actor_id, at), request_id=request_id,
                                       description=description, due_at=due_at))

    def submit_evidence(self, *, evidence_id: str, name: str, media_type: str, content: bytes,
                        sha256: str, actor_id: str, at: datetime) -> EvidenceSubmitted:
        """Record an evidence item answering the open request (:class:`EvidenceSubmitted`);
        the case moves to UNDER_REVIEW. The caller stores ``content``.

        Raises:
            InvalidTransition: no evidence was requested (the case is not AWAITING_EVIDENCE).
            CaseValidationError: empty name/media type, or content empty or larger than
                ``EVIDENCE_MAX_BYTES``.
        """
        name = check_text("name", name, EVIDENCE_NAME_MAX)
        media_type = check_text("media_type", media_type, MEDIA_TYPE_MAX)
        if not content:
            raise CaseValidationError("content_base64", "must not be empty")
        if len(content) > EVIDENCE_MAX_BYTES:
            raise CaseValidationError("content_base64",
                                      f"must decode to at most {EVIDENCE_MAX_BYTES} bytes")
        self._require(Action.SUBMIT_EVIDENCE)
        self.status, self.evidence_status = CaseStatus.UNDER_REVIEW, "submitted"
        if self.review_started_at is None:
            self.review_started_at = at
        event = EvidenceSubmitted(**self._meta(actor_id, at),
                                  request_id=self.evidence_request_id, evidence_id=evidence_id,
                                  name=name, media_type=media_type, size_bytes=len(content),
                                  sha256=sha256)
        self._record(event)
        return event

    def mark_overdue(self, *, grace: timedelta, actor_id: str, at: datetime) -> bool:
        """Record that the evidence is overdue (:class:`EvidenceOverdue`, the reminder),
        escalating ``grace`` later.

        Returns:
            False (no event) before the due date, or when the reminder was already recorded.
        Raises:
            InvalidTransition: the case is not AWAITING_EVIDENCE.
        """
        self._require(Action.MARK_OVERDUE)
        assert self.evidence_due_at is not None
        if self.evidence_status != "requested" or at < self.evidence_due_at:
            return False
        self.evidence_status, self.evidence_escalate_at = "overdue", at + grace
        self._record(EvidenceOverdue(**self._meta(actor_id, at),
                                     request_id=self.evidence_request_id,
                                     due_at=self.evidence_due_at, escalate_at=at + grace,
                                     recipient_email=self.content.reporter_email))
        return True

    def escalate(self, *, actor_id: str, at: datetime) -> bool:
        """Escalate overdue evidence to manual review (:class:`CaseEscalated`).

        Returns:
            False (no event) when no reminder was recorded or its grace has not passed.
        Raises:
            InvalidTransition: the case is not AWAITING_EVIDENCE.
        """
        self._require(Action.ESCALATE)
        if self.evidence_status != "overdue" or self.evidence_escalate_at is None \
                or at < self.evidence_escalate_at:
            return False
        self.status = CaseStatus.MANUAL_REVIEW
        self._record(CaseEscalated(**self._meta(actor_id, at),
                                   reason="evidence overdue after the reminder"))
        return True

    def start_review(self, *, actor_id: str, at: datetime) -> None:
        """Start reviewing an open case, recording :class:`ReviewStarted`.

        Raises:
            InvalidTransition: the case is not OPEN.
        """
        self._require(Action.START_REVIEW)
        self.status, self.review_started_at = CaseStatus.UNDER_REVIEW, at
        self._record(ReviewStarted(**self._meta(actor_id, at), officer_id=self.officer_id))

    def withdraw(self, *, reason: str, actor_id: str, at: datetime) -> None:
        """Withdraw the case before its decision, recording :class:`CaseWithdrawn` (final).

        Raises:
            InvalidTransition: the case was submitted for decision or has ended.
            CaseValidationError: empty or over-long reason.
        """
        reason = check_reason(reason)
        self._require(Action.WITHDRAW)
        self.status, self.withdraw_reason, self.resolved_at = CaseStatus.WITHDRAWN, reason, at
        self._record(CaseWithdrawn(**self._meta(actor_id, at), reason=reason))

    def appeal(self, *, reason: str, actor_id: str, at: datetime,
               window: timedelta = APPEAL_WINDOW) -> None:
        """Appeal the closing decision, recording :class:`AppealSubmitted` (case APPEALED).

        Raises:
            InvalidTransition: the case is not CLOSED, was closed without a violation, was
                appealed before, or ``window`` has passed since it was closed.
            CaseValidationError: empty or over-long reason.
        """
        reason = check_reason(reason)
        self._require(Action.APPEAL)
        refused = None
        if self.appealed_at is not None:
            refused = "appeal-closed-once: this case was appealed before"
        elif self.resolution is None or self.resolution.outcome is not Outcome.VIOLATION:
            refused = "appeal-violation-only: only a violation can be appealed"
        elif self.resolved_at is not None and at > self.resolved_at + window:
            refused = f"appeal-window: within {window.days} days of the decision"
        if refused:
            raise InvalidTransition(self.id, self.status.value, Action.APPEAL.value, refused)
        assert self.resolution is not None and self.resolution.outcome is not None
        self.status, self.appeal_reason, self.appealed_at = CaseStatus.APPEALED, reason, at
        self._record(AppealSubmitted(**self._meta(actor_id, at), reason=reason,
                                     outcome=self.resolution.outcome,
                                     penalty_cents=self.resolution.penalty_cents))

    def correct_notice(self, *, reason: str, penalty_cents: int, actor_id: str,
                       at: datetime) -> None:
        """Order a correction of the sent notice, recording :class:`NoticeCorrectionOrdered`
        (the status does not change; the correction notice is sent by the correction saga).

        Raises:
            InvalidTransition: the case is not CLOSED, or was closed without a violation
                (rule ``correction-violation-only``: no notice was sent).
            CaseValidationError: empty or over-long reason, negative penalty.
        """
        reason = check_reason(reason)
        self._require(Action.CORRECT_NOTICE)
        if self.resolution is None or self.resolution.outcome is not Outcome.VIOLATION:
            raise InvalidTransition(self.id, self.status.value, Action.CORRECT_NOTICE.value,
                                    "correction-violation-only: only a sent violation notice "
                                    "can be corrected")
        if isinstance(penalty_cents, bool) or not 0 <= penalty_cents < 2**63:
            raise CaseValidationError("penalty_cents", "must be an integer >= 0")
        self._record(NoticeCorrectionOrdered(**self._meta(actor_id, at), reason=reason,
                                             penalty_cents=penalty_cents))

    # --- events ---------------------------------------------------------------------

    def pull_events(self) -> list[CaseEvent]:
        """Return the events recorded since load/open, oldest first, and forget them."""
        events, self._pending = self._pending, []
        return events

    @property
    def pending_events(self) -> tuple[CaseEvent, ...]:
        """The events recorded and not yet pulled (read-only view)."""
        return tuple(self._pending)

    # --- internals ------------------------------------------------------------------

    def _require(self, action: Action) -> None:
        rule = rule_for(action)
        if self.status not in rule.allowed:
            raise InvalidTransition(self.id, self.status.value, action.value, rule.describe())

    def _resolve(self, status: CaseStatus, resolution: Resolution, at: datetime) -> None:
        self.status, self.resolution, self.resolved_at = status, resolution, at

    def _meta(self, actor_id: str, at: datetime) -> _EventMeta:
        return {"case_id": self.id, "tenant_id": self.tenant_id, "version": self.version + 1,
                "occurred_at": at, "actor_id": actor_id}

    def _record(self, event: CaseEvent) -> None:
        self.version = event.version
        self.updated_at = event.occurred_at
        self._pending.append(event)
