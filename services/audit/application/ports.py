"""Ports of the audit use cases; adapters implement them (PostgreSQL, in-memory)."""

from __future__ import annotations

from typing import Protocol

from services.audit.application.views import CaseTimeline
from services.audit.domain.entries import JournalEntry


class AuditJournal(Protocol):
    """Where events are recorded: the append-only journal and the case timeline projection.

    Bound to the caller's transaction (the consumer runtime's batch).
    """

    def record(self, entry: JournalEntry) -> None:
        """Record ``entry`` once: an event id already recorded changes nothing."""
        ...


class TimelineReader(Protocol):
    """Reads the case timeline projection."""

    def timeline(self, tenant_id: str, case_id: str) -> CaseTimeline | None:
        """Return the tenant's timeline of ``case_id`` in timeline order, or None if empty."""
        ...
