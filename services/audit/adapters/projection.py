"""All SQL of the audit projection, with table names as parameters (live or shadow).

:class:`AuditTables` names the tables one projection run writes: live handlers use
``AuditTables()`` (``audit_journal`` + ``case_timeline``); a replay rebuilding the
timeline uses ``AuditTables(journal=None, timeline="case_timeline_shadow")`` so the
append-only journal is never rewritten and the live timeline stays untouched until
:func:`swap_in_timeline`.

One event = one statement (one round trip): a data-modifying CTE inserts the journal row
and the statement inserts the timeline row; both ``ON CONFLICT (event_id) DO NOTHING``,
so applying an event twice changes nothing (the inbox already prevents it; this makes
replays into partly-filled tables safe too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from casestream.handlers import max_applied_at

from services.audit.domain.entries import JournalEntry

LIVE_JOURNAL = "audit_journal"
LIVE_TIMELINE = "case_timeline"

JOURNAL_COLUMNS = (
    "event_id", "event_type", "event_version", "source", "tenant_id", "aggregate_type",
    "aggregate_id", "aggregate_version", "occurred_at", "published_at", "correlation_id",
    "causation_id", "traceparent", "actor_id", "case_id", "summary", "payload",
    "kafka_topic", "kafka_partition", "kafka_offset",
)
TIMELINE_COLUMNS = (
    "event_id", "tenant_id", "case_id", "event_type", "event_version", "aggregate_type",
    "aggregate_version", "occurred_at", "published_at", "source", "summary",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditTables:
    """Table names of one projection run.

    Attributes:
        journal: the append-only journal, or None to skip it (timeline rebuilds).
        timeline: the case timeline table (live or shadow).
    """

    journal: str | None = LIVE_JOURNAL
    timeline: str = LIVE_TIMELINE


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaPosition:
    """Where an event was read (journal columns); unknown = empty topic, -1 offsets."""

    topic: str = ""
    partition: int = -1
    offset: int = -1


def _insert(table: str, columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("INSERT INTO {t} ({c}) VALUES ({v}) ON CONFLICT (event_id) DO NOTHING").format(
        t=sql.Identifier(table), c=sql.SQL(", ").join(map(sql.Identifier, columns)),
        v=sql.SQL(", ").join(sql.Placeholder(c) for c in columns))


@dataclass(frozen=True, slots=True)
class ProjectionSql:
    """The statements for one :class:`AuditTables` (built once per table set)."""

    with_case: sql.Composed | None
    without_case: sql.Composed | None

    @classmethod
    def for_tables(cls, tables: AuditTables) -> ProjectionSql:
        timeline = _insert(tables.timeline, TIMELINE_COLUMNS)
        if tables.journal is None:
            return cls(with_case=timeline, without_case=None)
        journal = _insert(tables.journal, JOURNAL_COLUMNS)
        both = sql.SQL("WITH journal AS ({j}) {t}").format(j=journal, t=timeline)
        return cls(with_case=both, without_case=journal)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def entry_params(entry: JournalEntry, position: KafkaPosition) -> dict[str, Any]:
    """Statement parameters of one entry (shared by journal and timeline columns)."""
    return {
        "event_id": entry.event_id, "event_type": entry.event_type,
        "event_version": entry.event_version, "source": entry.source,
        "tenant_id": entry.tenant_id, "aggregate_type": entry.aggregate_type,
        "aggregate_id": entry.aggregate_id, "aggregate_version": entry.aggregate_version,
        "occurred_at": entry.occurred_at, "published_at": entry.published_at,
        "correlation_id": entry.correlation_id, "causation_id": entry.causation_id,
        "traceparent": entry.traceparent, "actor_id": entry.actor_id,
        "case_id": entry.case_id, "summary": entry.summary,
        "payload": Jsonb(dict(entry.payload), dumps=_dumps),
        "kafka_topic": position.topic or None,
        "kafka_partition": position.partition if position.partition >= 0 else None,
        "kafka_offset": position.offset if position.offset >= 0 else None,
    }


def apply_entry(conn: psycopg.Connection[Any], statements: ProjectionSql, entry: JournalEntry,
                position: KafkaPosition) -> None:
    """Write one entry with ``statements`` (idempotent).

    Reads no result, so it stays cheap in the consumer runtime's pipeline mode (statements
    are sent without waiting; errors surface when the pipeline syncs).
    """
    query = statements.with_case if entry.case_id is not None else statements.without_case
    if query is not None:
        conn.execute(query, entry_params(entry, position))


TIMELINE_QUERY = """
SELECT event_id::text AS event_id, event_type, event_version, aggregate_type, aggregate_version,
       occurred_at, published_at, source, summary, applied_at
FROM {timeline}
WHERE tenant_id = %s AND case_id = %s
ORDER BY occurred_at, aggregate_version, event_id
"""

def timeline_rows(conn: psycopg.Connection[Any], tables: AuditTables, tenant_id: str,
                  case_id: str) -> list[dict[str, Any]]:
    """The tenant's timeline rows of ``case_id`` in timeline order (dict rows)."""
    from psycopg.rows import dict_row

    query = sql.SQL(TIMELINE_QUERY).format(timeline=sql.Identifier(tables.timeline))
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, (tenant_id, case_id))
        return cur.fetchall()


_TIMELINE_FRESHNESS = max_applied_at(LIVE_TIMELINE)


def projection_freshness(conn: psycopg.Connection[Any], tables: AuditTables) -> datetime | None:
    """When any event was last applied to the timeline ``tables.timeline`` (None if empty)."""
    return _TIMELINE_FRESHNESS(conn, {LIVE_TIMELINE: tables.timeline})


def create_shadow_timeline(conn: psycopg.Connection[Any], shadow: str,
                           live: str = LIVE_TIMELINE) -> None:
    """(Re)create ``shadow`` empty, with the live timeline's columns, defaults and indexes."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {s}").format(s=sql.Identifier(shadow)))
    conn.execute(sql.SQL("CREATE TABLE {s} (LIKE {l} INCLUDING ALL)").format(
        s=sql.Identifier(shadow), l=sql.Identifier(live)))


def swap_in_timeline(conn: psycopg.Connection[Any], shadow: str,
                     live: str = LIVE_TIMELINE) -> None:
    """Atomically replace the live timeline with ``shadow`` (run inside one transaction).

    The old table is dropped; readers block briefly on the ACCESS EXCLUSIVE lock and then
    see the new table.
    """
    retired = f"{live}_retired"
    conn.execute(sql.SQL("LOCK TABLE {l} IN ACCESS EXCLUSIVE MODE").format(l=sql.Identifier(live)))
    conn.execute(sql.SQL("ALTER TABLE {l} RENAME TO {r}").format(
        l=sql.Identifier(live), r=sql.Identifier(retired)))
    conn.execute(sql.SQL("ALTER TABLE {s} RENAME TO {l}").format(
        s=sql.Identifier(shadow), l=sql.Identifier(live)))
    conn.execute(sql.SQL("DROP TABLE {r}").format(r=sql.Identifier(retired)))
