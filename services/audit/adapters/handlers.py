"""Consumer handlers of the audit service (consumer ``audit.journal``, all four topics).

One ``PROJECTION`` handler per event type of the contract records the event in the
journal and its case's timeline, inside the runtime's batch transaction (with the inbox
and version-guard rows). Being projections, they also run in REPLAY mode, which is how
the timeline is rebuilt (``build_registry(AuditTables(journal=None, timeline=shadow))``).
"""

from __future__ import annotations

from collections.abc import Iterable

from casestream.events import Envelope
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry

from services.audit.adapters.postgres import PgAuditJournal
from services.audit.adapters.projection import AuditTables, KafkaPosition, ProjectionSql
from services.audit.application.service import record_event
from services.audit.domain.entries import KNOWN_EVENT_TYPES

CONSUMER = "audit.journal"
TOPICS = ("outbox.event.case", "outbox.event.saga", "outbox.event.decision",
          "outbox.event.notice")
PROJECTION_NAME = "audit.timeline"


def build_registry(tables: AuditTables = AuditTables(),
                   event_types: Iterable[str] = KNOWN_EVENT_TYPES) -> HandlerRegistry:
    """Return the registry recording every event type in ``event_types`` into ``tables``.

    Pass the catalog's event types to journal types added after this code was written.
    """
    statements = ProjectionSql.for_tables(tables)

    def record(ctx: HandlerContext, event: Envelope) -> None:
        position = KafkaPosition(topic=ctx.topic, partition=ctx.partition, offset=ctx.offset)
        record_event(PgAuditJournal(ctx.conn, statements, position), event)

    record.__qualname__ = f"audit.record[{tables.timeline}]"
    registry = HandlerRegistry()
    for event_type in sorted(set(event_types)):
        registry.add(event_type, record, kind=HandlerKind.PROJECTION)
    return registry
