"""Audit use cases: record an event (journal + timeline), read a case timeline."""

from __future__ import annotations

from casestream.events import Envelope

from services.audit.application.ports import AuditJournal, TimelineReader
from services.audit.application.views import CaseTimeline
from services.audit.domain.entries import JournalEntry, case_id_of, summarize
from services.audit.domain.errors import TimelineNotFound


def entry_from(event: Envelope) -> JournalEntry:
    """Build the journal entry of a decoded (upcast) envelope; case id and summary derived."""
    payload = dict(event.payload)
    return JournalEntry(
        event_id=str(event.event_id), event_type=event.event_type,
        event_version=event.event_version, source=event.source, tenant_id=event.tenant_id,
        aggregate_type=event.aggregate_type, aggregate_id=str(event.aggregate_id),
        aggregate_version=event.aggregate_version, occurred_at=event.occurred_at,
        published_at=event.published_at, correlation_id=event.correlation_id,
        causation_id=event.causation_id, traceparent=event.traceparent, actor_id=event.actor_id,
        payload=payload,
        case_id=case_id_of(event.aggregate_type, str(event.aggregate_id), payload),
        summary=summarize(event.event_type, event.event_version, payload),
    )


def record_event(journal: AuditJournal, event: Envelope) -> None:
    """Record ``event`` in the journal and its case's timeline (idempotent per event id)."""
    journal.record(entry_from(event))


def case_timeline(reader: TimelineReader, tenant_id: str, case_id: str) -> CaseTimeline:
    """Return the tenant's timeline of ``case_id``.

    Raises:
        TimelineNotFound: nothing recorded for this case and tenant.
    """
    timeline = reader.timeline(tenant_id, case_id)
    if timeline is None or not timeline.events:
        raise TimelineNotFound(case_id)
    return timeline
