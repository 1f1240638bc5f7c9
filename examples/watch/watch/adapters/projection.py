"""The case projection ``watch.cases``: one row per case in ``watch_cases`` (watch database).

Maintained live by consumer ``watch.cases`` on ``outbox.event.case`` (inbox + aggregate-version
guard: the consumer runtime); rebuilt with ``casestream replay watch.cases``. Every write is
idempotent per event (``WHERE w.last_version < EXCLUDED.last_version``), as a rebuildable
projection's must be: re-applying an event already reflected changes nothing. The row
rule is the domain's (:func:`watch.domain.apply_case_event`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import sql

from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.events import Envelope
from casestream.handlers import ProjectionSpec, TableNames, create_table_unless_exists, max_applied_at
from watch.domain import CASE_STATES, CaseView, apply_case_event
from watch.settings import WatchSettings

NAME = "watch.cases"
CONSUMER = "watch.cases"
TOPICS = ("outbox.event.case",)
TABLE = "watch_cases"

_DDL = """
CREATE TABLE {t} (
    case_id       text        PRIMARY KEY,
    tenant_id     text        NOT NULL,
    state         text        NOT NULL,
    title         text        NOT NULL,
    last_version  bigint      NOT NULL,
    updated_at    timestamptz NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now()
)
"""

_UPSERT = """
INSERT INTO {t} AS w (case_id, tenant_id, state, title, last_version, updated_at)
SELECT r->>0, r->>1, r->>2, r->>3, (r->>4)::bigint, (r->>5)::timestamptz
FROM jsonb_array_elements(%s::jsonb) r
ON CONFLICT (case_id) DO UPDATE SET
    state = EXCLUDED.state,
    title = CASE WHEN EXCLUDED.title <> '' THEN EXCLUDED.title ELSE w.title END,
    last_version = EXCLUDED.last_version,
    updated_at = EXCLUDED.updated_at,
    applied_at = now()
WHERE w.last_version < EXCLUDED.last_version
"""


def create_tables(conn: Any, names: TableNames) -> None:
    """Create ``names[watch_cases]`` unless it exists."""
    create_table_unless_exists(conn, names[TABLE], _DDL)


def fold(events: Sequence[Envelope]) -> list[CaseView]:
    """The view of each case after ``events`` (in order), from no prior view. Pure."""
    views: dict[str, CaseView | None] = {}
    for e in events:
        views[e.aggregate_id] = apply_case_event(
            views.get(e.aggregate_id), event_type=e.event_type, case_id=e.aggregate_id,
            tenant_id=e.tenant_id, aggregate_version=e.aggregate_version,
            occurred_at=e.occurred_at, payload=e.payload)
    return [v for v in views.values() if v is not None]


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[watch_cases]`` (one statement per run);
    the other ``event_types`` of the topic are ignored."""
    upsert = sql.SQL(_UPSERT).format(t=sql.Identifier(names[TABLE]))

    def project(ctx: HandlerContext, events: Sequence[Envelope]) -> None:
        rows = [(v.case_id, v.tenant_id, v.state, v.title, v.aggregate_version,
                 v.updated_at.isoformat()) for v in fold(events)]
        if rows:
            ctx.conn.execute(upsert, (json.dumps(rows),))

    project.__qualname__ = f"watch.cases[{names[TABLE]}]"
    reg = HandlerRegistry()
    for event_type in CASE_STATES:
        reg.add_batch(event_type, project, kind=HandlerKind.PROJECTION)
    reg.ignore(*(t for t in event_types if t not in CASE_STATES))
    return reg


def rows(conn: Any, table: str = TABLE) -> list[tuple[Any, ...]]:
    """Every row (case_id, tenant_id, state, title, last_version, updated_at), by case id."""
    return conn.execute(sql.SQL(
        "SELECT case_id, tenant_id, state, title, last_version, updated_at FROM {} "
        "ORDER BY case_id").format(sql.Identifier(table))).fetchall()


def _dsn() -> str:
    return WatchSettings().dsn


PROJECTION = ProjectionSpec(
    name=NAME, description="watched cases (state, last aggregate version, last change)",
    topics=TOPICS, live_consumer=CONSUMER, tables=(TABLE,), dsn=_dsn,
    create_tables=create_tables, registry=registry, freshness=max_applied_at(TABLE))
