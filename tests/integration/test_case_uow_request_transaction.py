"""The case service's unit of work under a request deadline, on the real server: it runs in
the one transaction that the deadline checkout opened (``casestream.http.pgdeadline``),
without a savepoint round trip of its own, and keeps the transaction's all-or-nothing."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from test_case_support import database_url_for, schema_dsn_for

from casestream.http.deadline import deadline_scope
from casestream.http.pgdeadline import DeadlinePool
from services.case.adapters.postgres import PgUnitOfWork


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest) -> Iterator[ConnectionPool[Any]]:
    with schema_dsn_for(database_url_for(request), "uow_tx") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE probe (id text PRIMARY KEY)")
        with ConnectionPool(dsn, min_size=1, max_size=1, timeout=20, open=True) as p:
            yield p


def _uow(pool: ConnectionPool[Any]) -> PgUnitOfWork:
    return PgUnitOfWork.factory(DeadlinePool(pool), lambda conn, events: None)()  # type: ignore[arg-type]


def _rows(pool: ConnectionPool[Any], key: str) -> int:
    with pool.connection() as conn:
        return conn.execute("SELECT count(*) FROM probe WHERE id = %s", (key,)).fetchone()[0]


def test_a_request_unit_of_work_sends_no_savepoint_and_commits(pool: ConnectionPool[Any]) -> None:
    key = uuid.uuid4().hex
    with tempfile.TemporaryFile() as trace:
        with pool.connection() as conn:  # the pool's one connection: the next checkout's
            conn.pgconn.trace(trace.fileno())  # libpq's protocol trace of what it sends
        with deadline_scope(10.0), _uow(pool) as uow:
            uow.conn.execute("INSERT INTO probe VALUES (%s)", (key,))
        uow.conn.pgconn.untrace()
        trace.seek(0)
        sent = trace.read().decode("utf-8", "replace")
    assert "INSERT INTO probe" in sent and "COMMIT" in sent
    assert "SAVEPOINT" not in sent and "RELEASE" not in sent
    assert _rows(pool, key) == 1


def test_a_failing_request_unit_of_work_leaves_nothing(pool: ConnectionPool[Any]) -> None:
    key = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="refused"):
        with deadline_scope(10.0), _uow(pool) as uow:
            uow.conn.execute("INSERT INTO probe VALUES (%s)", (key,))
            raise RuntimeError("refused")
    assert _rows(pool, key) == 0


def test_without_a_deadline_the_unit_of_work_opens_and_commits_its_own_transaction(
        pool: ConnectionPool[Any]) -> None:
    key = uuid.uuid4().hex
    with _uow(pool) as uow:
        uow.conn.execute("INSERT INTO probe VALUES (%s)", (key,))
    assert _rows(pool, key) == 1
    with pytest.raises(RuntimeError):
        with _uow(pool) as uow:
            uow.conn.execute("INSERT INTO probe VALUES (%s)", (key + "x",))
            raise RuntimeError("refused")
    assert _rows(pool, key + "x") == 0


