"""Replay registration of the audit case timeline (projection ``audit.timeline``).

Rebuilds ``case_timeline`` from the four event topics into a shadow table created ``LIKE
case_timeline INCLUDING ALL``; the append-only journal is never rewritten. The rows are the
live handler's: each event's case id and summary come from the audit service's own rules
(``case_id_of``, ``summarize``, as in ``entry_from``), and the timeline columns are written as
``apply_entry`` writes them — but per run of events instead of per event
(:func:`batch_registry`, used by replays, through ``insert_batch_registry``: one binary ``COPY``
in a replay, else one ``INSERT ... SELECT FROM jsonb_array_elements``).
``handlers.build_registry(AuditTables(journal=None, ...))`` is the per-event equivalent.
Inserts are ``ON CONFLICT (event_id) DO NOTHING``, which is what makes the handover to the
live ``audit.journal`` consumer exact (see ``casestream.replay.engine``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from casestream.events import Envelope
from casestream.handlers import HandlerRegistry
from casestream.handlers import ProjectionSpec, TableNames, insert_batch_registry, max_applied_at

from services.audit.adapters import handlers
from services.audit.adapters.projection import (
    LIVE_TIMELINE,
    TIMELINE_COLUMNS,
    AuditTables,
    create_shadow_timeline,
)
from services.audit.domain.entries import KNOWN_EVENT_TYPES, case_id_of, summarize


def _dsn() -> str:
    from services.audit.settings import AuditSettings

    return AuditSettings().dsn


def create_tables(conn: Any, names: TableNames) -> None:
    """Create the shadow timeline (the live one belongs to ``migrations/001_audit.sql``)."""
    target = names[LIVE_TIMELINE]
    if target != LIVE_TIMELINE:
        create_shadow_timeline(conn, target)


def registry(names: TableNames, event_types: Iterable[str]) -> HandlerRegistry:
    """The audit handlers writing only the timeline table ``names[case_timeline]`` (per event)."""
    tables = AuditTables(journal=None, timeline=names[LIVE_TIMELINE])
    return handlers.build_registry(tables, event_types={*KNOWN_EVENT_TYPES, *event_types})


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


def batch_registry(names: TableNames, event_types: Iterable[str]) -> HandlerRegistry:
    """One PROJECTION batch handler for every event type writing ``names[case_timeline]``."""
    return insert_batch_registry(f"audit.timeline[{names[LIVE_TIMELINE]}]", names[LIVE_TIMELINE],
                                 TIMELINE_COLUMN_TYPES,
                                 lambda events: [r for r in map(timeline_row, events) if r is not None],
                                 sorted({*KNOWN_EVENT_TYPES, *event_types}))


PROJECTION = ProjectionSpec(
    name=handlers.PROJECTION_NAME,
    description="audit case timeline (one row per event of a case)",
    topics=tuple(handlers.TOPICS),
    live_consumer=handlers.CONSUMER,
    tables=(LIVE_TIMELINE,),
    dsn=_dsn,
    create_tables=create_tables,
    registry=batch_registry,
    freshness=max_applied_at(LIVE_TIMELINE),
)
