"""Domain events of the case aggregate: past-tense facts recorded by :class:`Case`.

They carry what happened in domain terms; the application layer maps them to the
integration events of the team contract (CaseOpened v3, CaseSubmitted v1, CaseClosed v1,
CaseReturned v1) in :mod:`services.case.application.integration`.
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
