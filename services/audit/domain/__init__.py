"""Audit domain: journal entries, the case-of-an-event rule and event summaries (stdlib only)."""

from services.audit.domain.entries import (
    KNOWN_EVENT_TYPES,
    JournalEntry,
    case_id_of,
    summarize,
)
from services.audit.domain.errors import AuditError, TimelineNotFound

__all__ = [
    "KNOWN_EVENT_TYPES",
    "AuditError",
    "JournalEntry",
    "TimelineNotFound",
    "case_id_of",
    "summarize",
]
