"""PostgreSQL saga store (tables of ``migrations/001_saga.sql``), psycopg 3.

:class:`PgSagaStore` works on a connection the caller owns, inside the caller's
transaction (the consumer runtime's batch transaction, or the scheduler's): it never
commits. :class:`PgSagaQueries` serves the HTTP read side from a connection pool.

Optimistic concurrency: ``UPDATE saga ... WHERE saga_id = %s AND version = %s``; under
READ COMMITTED a concurrent writer blocks on the row lock and re-checks the WHERE clause
after the winner commits, so exactly one of two writers at the same version succeeds and
the other gets :class:`~casestream.errors.ConcurrencyError`.

Deadline claims: ``SELECT ... WHERE deadline_at <= now FOR UPDATE SKIP LOCKED`` — rows
another scheduler (or a handler's UPDATE) holds are skipped, never waited for.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from casestream.errors import ConcurrencyError
from services.saga.application.ports import HistoryRecord
from services.saga.domain.engine import Disposition, HistoryEntry, SagaInstance

_COLUMNS = ("saga_id::text, definition, case_id, tenant_id, correlation_id, state, step, "
            "attempts, deadline_at, data, version, event_seq, last_event_id")


def _saga(row: tuple[Any, ...]) -> SagaInstance:
    (saga_id, definition, case_id, tenant_id, correlation_id, state, step, attempts,
     deadline_at, data, version, event_seq, last_event_id) = row
    return SagaInstance(saga_id=saga_id, definition=definition, case_id=case_id,
                        tenant_id=tenant_id, correlation_id=correlation_id, state=state,
                        step=step, attempts=attempts, deadline_at=deadline_at, data=data,
                        version=version, event_seq=event_seq, last_event_id=last_event_id)


class PgSagaStore:
    """:class:`~services.saga.application.ports.SagaStore` on one psycopg connection.

    Args:
        conn: a psycopg connection with a transaction open (never committed here).
    """

    def __init__(self, conn: Any):
        self.conn = conn

    def _one(self, where: str, params: tuple[Any, ...]) -> SagaInstance | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM saga WHERE {where}", params).fetchone()
        return None if row is None else _saga(row)

    def get(self, saga_id: str) -> SagaInstance | None:
        return self._one("saga_id = %s::uuid", (saga_id,))

    def newest_for_case(self, case_id: str) -> SagaInstance | None:
        return self._one("case_id = %s ORDER BY created_at DESC, saga_id LIMIT 1", (case_id,))

    def active_for_case(self, case_id: str) -> SagaInstance | None:
        return self._one("case_id = %s AND active", (case_id,))

    def insert(self, saga: SagaInstance, *, started_by: str, active: bool) -> bool:
        row = self.conn.execute(
            """INSERT INTO saga (saga_id, definition, case_id, tenant_id, correlation_id, state,
                                 step, attempts, deadline_at, data, version, event_seq, active,
                                 started_by, last_event_id)
               VALUES (%s::uuid, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT DO NOTHING RETURNING 1""",
            (saga.saga_id, saga.definition, saga.case_id, saga.tenant_id, saga.correlation_id,
             saga.state, saga.step, saga.attempts, saga.deadline_at, Jsonb(dict(saga.data)),
             saga.version, saga.event_seq, active, started_by, saga.last_event_id),
        ).fetchone()
        return row is not None

    def update(self, saga: SagaInstance, *, expected_version: int, active: bool) -> None:
        row = self.conn.execute(
            """UPDATE saga SET state = %s, step = %s, attempts = %s, deadline_at = %s, data = %s,
                               version = %s, event_seq = %s, active = %s, last_event_id = %s,
                               updated_at = now()
               WHERE saga_id = %s::uuid AND version = %s RETURNING 1""",
            (saga.state, saga.step, saga.attempts, saga.deadline_at, Jsonb(dict(saga.data)),
             saga.version, saga.event_seq, active, saga.last_event_id, saga.saga_id,
             expected_version),
        ).fetchone()
        if row is None:
            current = self.conn.execute("SELECT version FROM saga WHERE saga_id = %s::uuid",
                                        (saga.saga_id,)).fetchone()
            raise ConcurrencyError("saga", saga.saga_id, expected_version,
                                   None if current is None else current[0])

    def seen(self, saga_id: str, event_id: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM saga_history WHERE saga_id = %s::uuid AND event_id = %s",
            (saga_id, event_id)).fetchone()
        return row is not None

    def record(self, saga_id: str, entry: HistoryEntry) -> None:
        self.conn.execute(
            """INSERT INTO saga_history (saga_id, at, trigger, event_id, from_state, to_state,
                                         disposition, note)
               VALUES (%s::uuid, %s, %s, %s, %s, %s, %s, %s)""",
            (saga_id, entry.at, entry.trigger, entry.event_id, entry.from_state, entry.to_state,
             entry.disposition.value, entry.note))

    def claim_due(self, now: datetime, limit: int) -> builtins.list[SagaInstance]:
        rows = self.conn.execute(
            f"""SELECT {_COLUMNS} FROM saga WHERE deadline_at <= %s
                ORDER BY deadline_at LIMIT %s FOR UPDATE SKIP LOCKED""",
            (now, limit)).fetchall()
        return [_saga(r) for r in rows]


class PgSagaQueries:
    """:class:`~services.saga.application.ports.SagaQueries` over a psycopg_pool pool."""

    def __init__(self, pool: Any):
        self.pool = pool

    def get(self, saga_id: str) -> SagaInstance | None:
        with self.pool.connection() as conn:
            return PgSagaStore(conn).get(saga_id)

    def history(self, saga_id: str) -> builtins.list[HistoryRecord]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                """SELECT seq, at, trigger, event_id, from_state, to_state, disposition, note
                   FROM saga_history WHERE saga_id = %s::uuid ORDER BY seq""",
                (saga_id,)).fetchall()
        return [HistoryRecord(seq=r[0], entry=HistoryEntry(
            at=r[1], trigger=r[2], event_id=r[3], from_state=r[4], to_state=r[5],
            disposition=Disposition(r[6]), note=r[7])) for r in rows]

    def list(self, *, tenant_id: str | None, state: str | None, case_id: str | None,
             limit: int) -> builtins.list[SagaInstance]:
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        if tenant_id is not None:
            clauses.append("tenant_id = %s")
            params.append(tenant_id)
        if state is not None:
            clauses.append("state = %s")
            params.append(state)
        if case_id is not None:
            clauses.append("case_id = %s")
            params.append(case_id)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM saga {where} ORDER BY created_at DESC, saga_id LIMIT %s",
                (*params, limit)).fetchall()
        return [_saga(r) for r in rows]

    def stuck(self, *, tenant_id: str | None, states: Collection[str], older_than: datetime,
              limit: int) -> builtins.list[SagaInstance]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"""SELECT {_COLUMNS} FROM saga
                    WHERE active AND state = ANY(%s)
                      AND (%s::text IS NULL OR tenant_id = %s)
                      AND (deadline_at < %s OR (deadline_at IS NULL AND updated_at < %s))
                    ORDER BY deadline_at NULLS LAST, updated_at LIMIT %s""",
                (builtins.list(states), tenant_id, tenant_id, older_than, older_than,
                 limit)).fetchall()
        return [_saga(r) for r in rows]

    def count_by_state(self, *, tenant_id: str | None) -> dict[str, int]:
        """``{state: number of sagas}`` of ``tenant_id`` (None: every tenant)."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT state, count(*) FROM saga WHERE (%s::text IS NULL OR tenant_id = %s) "
                "GROUP BY state", (tenant_id, tenant_id)).fetchall()
        return {r[0]: r[1] for r in rows}
