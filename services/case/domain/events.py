"""Domain events of the case aggregate: past-tense facts recorded by :class:`Case`.

They carry what happened in domain terms; the application layer maps them to the
integration events of the team contract (versions pinned in
``services.case.application.integration.EVENT_VERSIONS``) in
:mod:`services.case.application.integration`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.case.domain.values import CaseContent, Outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseEvent:
    """Fields every case event has.

    Attributes:
        case_id: the aggregate id (UUID string).
        tenant_id: the owning tenant.
        version: the aggregate version this event brings the case to (>= 1).
        occurred_at: when it happened (timezone-aware UTC).
        actor_id: who did it (a user, or ``saga`` for the orchestrator's requests).
    """

    case_id: str
    tenant_id: str
    version: int
    occurred_at: datetime
    actor_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseOpened(CaseEvent):
    """A case was opened with this content."""

    content: CaseContent


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseSubmitted(CaseEvent):
    """An open case was submitted for decision; carries the content the saga needs."""

    content: CaseContent
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseClosed(CaseEvent):
    """A submitted case was closed with a decision."""

    outcome: Outcome
    penalty_cents: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseReturned(CaseEvent):
    """A submitted case was returned (the saga's compensation) with a reason."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseAssigned(CaseEvent):
    """An officer was made responsible for the case (``previous_officer_id``: None the first time)."""

    officer_id: str
    previous_officer_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceRequested(CaseEvent):
    """Evidence was asked for, to arrive by ``due_at`` (timezone-aware UTC)."""

    request_id: str
    description: str
    due_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceSubmitted(CaseEvent):
    """An evidence item arrived: its metadata and the SHA-256 of its content (hex)."""

    request_id: str | None
    evidence_id: str
    name: str
    media_type: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewStarted(CaseEvent):
    """An officer started reviewing the case."""

    officer_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseWithdrawn(CaseEvent):
    """The case was withdrawn before its decision, with a reason (final)."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AppealSubmitted(CaseEvent):
    """The party appealed the closing decision (``outcome``/``penalty_cents``) with a reason."""

    reason: str
    outcome: Outcome
    penalty_cents: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class NoticeCorrectionOrdered(CaseEvent):
    """A supervisor ordered a correction of the case's sent notice: why, and the corrected
    penalty (cents). The sent notice stays on record; a correction notice follows it."""

    reason: str
    penalty_cents: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceOverdue(CaseEvent):
    """The evidence request's due date passed without evidence: the party is reminded, and
    the case escalates to manual review at ``escalate_at`` unless evidence arrives.
    ``recipient_email``: the party to remind (the case's reporter); None when unknown."""

    request_id: str | None
    due_at: datetime
    escalate_at: datetime
    recipient_email: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseEscalated(CaseEvent):
    """The case was escalated to manual review (an officer decides how it goes on)."""

    reason: str
