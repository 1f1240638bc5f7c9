"""The audit projection's one registry (consumer ``audit.journal``, all four topics), live and
in a replay.

One ``PROJECTION`` batch handler for every event type of the contract. Live, with a journal
table (``AuditTables()``), it records each event in the journal and its case's timeline, one
statement per event, inside the runtime's batch transaction (with the inbox and version-guard
rows). In a replay, or without a journal (``AuditTables(journal=None, timeline=...)``), it
writes only the timeline rows of the whole run at once (``insert_batch_registry``: one binary
``COPY`` in a replay, else one ``INSERT ... SELECT FROM jsonb_array_elements``): the append-only
journal is never rewritten. The replay of ``audit.timeline`` (``adapters/replay.py``) builds
this same registry for the shadow table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from casestream.events import Envelope
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry, ProcessingMode, insert_batch_registry

from services.audit.adapters.postgres import PgAuditJournal
from services.audit.adapters.projection import TIMELINE_COLUMNS, AuditTables, KafkaPosition, ProjectionSql
from services.audit.application.service import record_event
from services.audit.domain.entries import KNOWN_EVENT_TYPES, case_id_of, summarize

CONSUMER = "audit.journal"
TOPICS = ("outbox.event.case", "outbox.event.saga", "outbox.event.decision",
          "outbox.event.notice")
PROJECTION_NAME = "audit.timeline"


#: (column, type) of the timeline rows in :func:`timeline_row` order (``insert_batch_registry``).
TIMELINE_COLUMN_TYPES = tuple(zip(TIMELINE_COLUMNS, (
    "uuid", "text", "text", "text", "integer", "text", "bigint", "timestamptz", "timestamptz",
    "text", "text"), strict=True))


def timeline_row(event: Envelope) -> tuple[Any, ...] | None:
    """The timeline row of ``event`` (TIMELINE_COLUMNS order), None if it has no case.

    The columns of ``entry_from(event)`` without building the whole journal entry (the
    journal-only fields and a payload copy): case id and summary come from the same domain
    rules ``entry_from`` applies (``case_id_of``, ``summarize``).
    """
    payload = event.payload
    case_id = case_id_of(event.aggregate_type, str(event.aggregate_id), payload)
    if case_id is None:
        return None
    return (str(event.event_id), event.tenant_id, case_id, event.event_type,
            event.event_version, event.aggregate_type, event.aggregate_version,
            event.occurred_at, event.published_at, event.source,
            summarize(event.event_type, event.event_version, payload))


def build_registry(tables: AuditTables = AuditTables(),
                   event_types: Iterable[str] = KNOWN_EVENT_TYPES) -> HandlerRegistry:
    """Return the registry recording every event type in ``event_types`` into ``tables``
    (journal and timeline live; the timeline alone in a replay or when ``tables.journal`` is
    None).

    Pass the catalog's event types to journal types added after this code was written.
    """
    types = sorted(set(event_types))
    statements = ProjectionSql.for_tables(tables)
    timeline_batch = insert_batch_registry(
        f"audit.timeline[{tables.timeline}]", tables.timeline, TIMELINE_COLUMN_TYPES,
        lambda events: [r for r in map(timeline_row, events) if r is not None], types)
    write_timeline = timeline_batch.handlers_for(types[0], ProcessingMode.REPLAY)[0].fn if types else None

    def record(ctx: HandlerContext, events: Sequence[Envelope]) -> None:
        if tables.journal is None or ctx.mode is ProcessingMode.REPLAY:
            write_timeline(ctx, events)  # type: ignore[misc]
            return
        for (topic, partition, offset), event in zip(ctx.positions, events, strict=True):
            record_event(PgAuditJournal(ctx.conn, statements,
                                        KafkaPosition(topic=topic, partition=partition, offset=offset)),
                         event)

    record.__qualname__ = f"audit.record[{tables.timeline}]"
    if write_timeline is not None:
        record.__dict__.update(write_timeline.__dict__)  # its COPY marker: a replay batch runs outside a pipeline
    registry = HandlerRegistry()
    for event_type in types:
        registry.add_batch(event_type, record, kind=HandlerKind.PROJECTION)
    return registry
