"""PostgreSQL adapters of the audit ports: the journal writer and the timeline reader."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from services.audit.adapters.projection import (
    AuditTables,
    KafkaPosition,
    ProjectionSql,
    apply_entry,
    projection_freshness,
    timeline_rows,
)
from services.audit.application.views import CaseTimeline, TimelineEvent
from services.audit.domain.entries import JournalEntry


class PgAuditJournal:
    """``AuditJournal`` on a connection inside the caller's transaction (never commits)."""

    def __init__(self, conn: psycopg.Connection[Any], statements: ProjectionSql,
                 position: KafkaPosition = KafkaPosition()) -> None:
        self._conn = conn
        self._statements = statements
        self._position = position

    def record(self, entry: JournalEntry) -> None:
        apply_entry(self._conn, self._statements, entry, self._position)


class PgTimelineReader:
    """``TimelineReader`` over a pool (one short read transaction per call)."""

    def __init__(self, pool: ConnectionPool[Any], tables: AuditTables = AuditTables()) -> None:
        self._pool = pool
        self._tables = tables

    def timeline(self, tenant_id: str, case_id: str) -> CaseTimeline | None:
        with self._pool.connection() as conn:
            rows = timeline_rows(conn, self._tables, tenant_id, case_id)
            if not rows:
                return None
            freshness = projection_freshness(conn, self._tables)
        events = tuple(TimelineEvent(**{k: v for k, v in row.items() if k != "applied_at"})
                       for row in rows)
        return CaseTimeline(case_id=case_id, tenant_id=tenant_id, events=events,
                            case_last_applied_at=max(row["applied_at"] for row in rows),
                            projection_last_applied_at=freshness)
