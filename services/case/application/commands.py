"""Commands (inputs) and views (outputs) of the case use cases: frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.case.application.integration import Causation
from services.case.domain.case import Case


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
        )
