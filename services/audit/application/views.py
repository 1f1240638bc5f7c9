"""What the audit API returns: a case timeline and its freshness (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineEvent:
    """One event in a case timeline."""

    event_id: str
    event_type: str
    event_version: int
    aggregate_type: str
    aggregate_version: int
    occurred_at: datetime
    published_at: datetime | None
    source: str
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseTimeline:
    """A case's events ordered by ``occurred_at``, then ``aggregate_version``, then event id.

    Attributes:
        case_last_applied_at: when the newest event of this case was applied to the projection.
        projection_last_applied_at: when any event was last applied (how fresh the read model is).
    """

    case_id: str
    tenant_id: str
    events: tuple[TimelineEvent, ...]
    case_last_applied_at: datetime | None
    projection_last_applied_at: datetime | None
