"""Replay registration of the audit case timeline (projection ``audit.timeline``).

Rebuilds ``case_timeline`` from the four event topics into a shadow table created ``LIKE
case_timeline INCLUDING ALL``; the append-only journal is never rewritten. The registry is the
live consumer's own (``handlers.build_registry``), for the table the replay names: in REPLAY its
one batch handler writes the timeline rows of a run at once (``insert_batch_registry``: one
binary ``COPY``), as ``apply_entry`` writes them live. Inserts are ``ON CONFLICT (event_id) DO
NOTHING``, which is what makes the handover to the live ``audit.journal`` consumer exact (see
``casestream.replay.engine``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from casestream.handlers import HandlerRegistry, ProjectionSpec, TableNames, max_applied_at

from services.audit.adapters import handlers
from services.audit.adapters.projection import LIVE_TIMELINE, AuditTables, create_shadow_timeline
from services.audit.domain.entries import KNOWN_EVENT_TYPES


def _dsn() -> str:
    from services.audit.settings import AuditSettings

    return AuditSettings().dsn


def create_tables(conn: Any, names: TableNames) -> None:
    """Create the shadow timeline (the live one belongs to ``migrations/001_audit.sql``)."""
    target = names[LIVE_TIMELINE]
    if target != LIVE_TIMELINE:
        create_shadow_timeline(conn, target)


def batch_registry(names: TableNames, event_types: Iterable[str]) -> HandlerRegistry:
    """The audit registry (``handlers.build_registry``) writing only the timeline table
    ``names[case_timeline]``."""
    tables = AuditTables(journal=None, timeline=names[LIVE_TIMELINE])
    return handlers.build_registry(tables, event_types={*KNOWN_EVENT_TYPES, *event_types})


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
