"""PostgreSQL adapters: the :class:`~watch.application.ports.WatchRepository` over one
connection, and the HTTP side's unit of work over a pool."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from casestream.http import PgIdempotencyStore
from watch.adapters.projection import TABLE
from watch.domain import CaseView, Watch

_CASE = (f"SELECT case_id, tenant_id, state, title, last_version, updated_at FROM {TABLE} "
         "WHERE tenant_id = %s AND case_id = %s")
_WATCHES = ("SELECT case_id, tenant_id, watcher_id, version, created_at FROM watches "
            "WHERE tenant_id = %s AND case_id = %s ORDER BY watcher_id FOR UPDATE")
_ADD = ("INSERT INTO watches (tenant_id, case_id, watcher_id, version, created_at) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING created_at")
_GET = ("SELECT case_id, tenant_id, watcher_id, version, created_at FROM watches "
        "WHERE tenant_id = %s AND case_id = %s AND watcher_id = %s")
_SAVE = ("UPDATE watches SET version = %s WHERE tenant_id = %s AND case_id = %s "
         "AND watcher_id = %s RETURNING version")


def _watch(row: tuple[Any, ...]) -> Watch:
    return Watch(case_id=row[0], tenant_id=row[1], watcher_id=row[2], version=row[3],
                 created_at=row[4])


class PgWatchRepository:
    """Cases and watches on ``conn`` (inside the caller's transaction; no commit)."""

    def __init__(self, conn: Any):
        self.conn = conn
        self.idempotency = PgIdempotencyStore(conn)

    def case(self, tenant_id: str, case_id: str) -> CaseView | None:
        row = self.conn.execute(_CASE, (tenant_id, case_id)).fetchone()
        if row is None:
            return None
        return CaseView(case_id=row[0], tenant_id=row[1], state=row[2], title=row[3],
                        aggregate_version=row[4], updated_at=row[5])

    def watches_of(self, tenant_id: str, case_id: str) -> list[Watch]:
        return [_watch(r) for r in self.conn.execute(_WATCHES, (tenant_id, case_id)).fetchall()]

    def add_watch(self, watch: Watch) -> tuple[Watch, bool]:
        created = self.conn.execute(_ADD, (watch.tenant_id, watch.case_id, watch.watcher_id,
                                           watch.version, watch.created_at)).fetchone()
        if created is not None:
            return watch, True
        row = self.conn.execute(_GET, (watch.tenant_id, watch.case_id,
                                       watch.watcher_id)).fetchone()
        return _watch(row), False

    def save_watch(self, watch: Watch) -> None:
        self.conn.execute(_SAVE, (watch.version, watch.tenant_id, watch.case_id,
                                  watch.watcher_id)).fetchone()


class PgUnitOfWork:
    """``with uow() as repo``: one transaction on a connection drawn from ``pool``
    (``connection()`` commits on a normal exit, rolls back on an exception)."""

    def __init__(self, pool: Any):
        self.pool = pool

    @contextmanager
    def __call__(self) -> Iterator[PgWatchRepository]:
        with self.pool.connection() as conn:
            yield PgWatchRepository(conn)
