"""Commands (inputs) and views (outputs) of the case use cases: frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.case.application.integration import Causation
from services.case.domain.case import Case


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseWrite:
    """Fields of every workflow command on an existing case (HTTP, Idempotency-Key required).

    ``expected_version`` (from If-Match) is checked when given.
    """

    tenant_id: str
    actor_id: str
    case_id: str
    expected_version: int | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignOfficer(CaseWrite):
    """Make ``officer_id`` responsible (the same officer again changes nothing)."""

    officer_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEvidence(CaseWrite):
    """Ask for evidence due by ``due_at`` (timezone-aware)."""

    description: str
    due_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitEvidence(CaseWrite):
    """Submit one evidence item (content decoded, at most ``EVIDENCE_MAX_BYTES`` bytes)."""

    name: str
    media_type: str
    content: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class StartReview(CaseWrite):
    """Start reviewing an open case."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WithdrawCase(CaseWrite):
    """Withdraw a case before its decision."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AppealCase(CaseWrite):
    """Appeal the closing decision of a case (within the appeal window)."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectNotice(CaseWrite):
    """Order a correction of a closed case's sent notice (supervisor)."""

    reason: str
    penalty_cents: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseQuery:
    """``GET /cases`` filters, all optional, and the keyset page.

    Attributes:
        status, officer_id, severity: equality filters.
        opened_from, opened_to: ``opened_from <= opened_at < opened_to``.
        limit: most cases returned (1..1000).
        after: the ``(opened_at, id)`` of the last case of the previous page; the page holds
            cases ordered by ``(opened_at, id)`` strictly after it.
    """

    tenant_id: str
    status: str | None = None
    officer_id: str | None = None
    severity: int | None = None
    opened_from: datetime | None = None
    opened_to: datetime | None = None
    limit: int = 50
    after: tuple[datetime, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceView:
    """An evidence item's metadata as clients see it (never its content)."""

    id: str
    case_id: str
    request_id: str | None
    name: str
    media_type: str
    size_bytes: int
    sha256: str
    submitted_by: str
    submitted_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenCase:
    """Open a case for ``tenant_id``; content is validated by ``CaseContent``."""

    tenant_id: str
    actor_id: str
    title: str
    summary: str
    severity: int
    evidence_count: int
    reporter_email: str
    priority: str = "NORMAL"
    traceparent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitCase:
    """Submit an open case. ``expected_version`` (from If-Match) is checked when given."""

    tenant_id: str
    actor_id: str
    case_id: str
    note: str | None = None
    expected_version: int | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseCase:
    """Close a submitted case as the saga asked (CaseCloseRequested)."""

    tenant_id: str
    case_id: str
    outcome: str
    penalty_cents: int | None
    actor_id: str
    causation: Causation


@dataclass(frozen=True, slots=True, kw_only=True)
class ReturnCase:
    """Return a submitted case as the saga asked (CaseReturnRequested, compensation)."""

    tenant_id: str
    case_id: str
    reason: str
    actor_id: str
    causation: Causation


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseView:
    """A case as clients see it (``GET /cases/{id}`` and write responses)."""

    id: str
    tenant_id: str
    status: str
    version: int
    title: str
    summary: str
    severity: int
    evidence_count: int
    reporter_email: str
    priority: str
    opened_by: str
    opened_at: datetime
    updated_at: datetime
    submitted_by: str | None
    submitted_at: datetime | None
    note: str | None
    outcome: str | None
    penalty_cents: int | None
    return_reason: str | None
    resolved_at: datetime | None
    officer_id: str | None
    evidence_status: str
    evidence_due_at: datetime | None
    evidence_description: str | None
    review_started_at: datetime | None
    withdraw_reason: str | None
    appeal_reason: str | None
    appealed_at: datetime | None

    @classmethod
    def of(cls, case: Case) -> CaseView:
        """Snapshot the aggregate's current state."""
        c, r = case.content, case.resolution
        return cls(
            id=case.id, tenant_id=case.tenant_id, status=case.status.value, version=case.version,
            title=c.title, summary=c.summary, severity=c.severity,
            evidence_count=c.evidence_count, reporter_email=c.reporter_email,
            priority=c.priority.value, opened_by=case.opened_by, opened_at=case.opened_at,
            updated_at=case.updated_at, submitted_by=case.submitted_by,
            submitted_at=case.submitted_at, note=case.note,
            outcome=r.outcome.value if r and r.outcome else None,
            penalty_cents=r.penalty_cents if r else None,
            return_reason=r.reason if r else None, resolved_at=case.resolved_at,
            officer_id=case.officer_id, evidence_status=case.evidence_status,
            evidence_due_at=case.evidence_due_at, evidence_description=case.evidence_description,
            review_started_at=case.review_started_at, withdraw_reason=case.withdraw_reason,
            appeal_reason=case.appeal_reason, appealed_at=case.appealed_at,
        )
