"""Replay registration of the audit case timeline (projection ``audit.timeline``).

Rebuilds ``case_timeline`` from the four event topics with the audit service's own handlers
(``handlers.build_registry``) pointed at the shadow table and without the journal
(``AuditTables(journal=None, ...)``: the append-only journal is never rewritten). The shadow
is created ``LIKE case_timeline INCLUDING ALL``; timeline inserts are ``ON CONFLICT
(event_id) DO NOTHING``, which is what makes the handover to the live ``audit.journal``
consumer exact (see ``casestream.replay.engine``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from casestream.handlers import HandlerRegistry
from casestream.replay.projection import ProjectionSpec, TableNames

from services.audit.adapters import handlers
from services.audit.adapters.projection import (
    LIVE_TIMELINE,
    AuditTables,
    create_shadow_timeline,
    projection_freshness,
)
from services.audit.domain.entries import KNOWN_EVENT_TYPES


def _dsn() -> str:
    from services.audit.settings import AuditSettings

    return AuditSettings().dsn


def create_tables(conn: Any, names: TableNames) -> None:
    """Create the shadow timeline (the live one belongs to ``migrations/001_audit.sql``)."""
    target = names[LIVE_TIMELINE]
    if target != LIVE_TIMELINE:
        create_shadow_timeline(conn, target)


def registry(names: TableNames, event_types: Iterable[str]) -> HandlerRegistry:
    """The audit handlers writing only the timeline table ``names[case_timeline]``."""
    tables = AuditTables(journal=None, timeline=names[LIVE_TIMELINE])
    return handlers.build_registry(tables, event_types={*KNOWN_EVENT_TYPES, *event_types})


def freshness(conn: Any, names: TableNames) -> datetime | None:
    """When an event was last applied to the timeline."""
    return projection_freshness(conn, AuditTables(journal=None, timeline=names[LIVE_TIMELINE]))


PROJECTION = ProjectionSpec(
    name=handlers.PROJECTION_NAME,
    description="audit case timeline (one row per event of a case)",
    topics=tuple(handlers.TOPICS),
    live_consumer=handlers.CONSUMER,
    tables=(LIVE_TIMELINE,),
    dsn=_dsn,
    create_tables=create_tables,
    registry=registry,
    freshness=freshness,
)
