"""Request deadlines on PostgreSQL calls (``casestream.http.pgdeadline``) on the real server.

Every database call made under a request deadline waits at most the time left: the
connection checkout, each statement (``statement_timeout``), and all statements together
(the watchdog cancels at the deadline). A deadline is never extended, and a pooled
connection never keeps a request's ``statement_timeout``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool, PoolTimeout
from test_case_support import database_url_for

from casestream.http.deadline import DeadlineExceeded, deadline_scope
from casestream.http.pgdeadline import DeadlinePool


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest) -> Iterator[ConnectionPool[Any]]:
    with ConnectionPool(database_url_for(request), min_size=1, max_size=1, timeout=20,
                        open=True) as p:
        yield p


def statement_timeout(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW statement_timeout").fetchone()
    assert row is not None
    return str(row[0])


def test_without_a_deadline_it_is_the_plain_pool(pool: ConnectionPool[Any]) -> None:
    with DeadlinePool(pool).connection() as conn:
        assert statement_timeout(conn) == "0"


def test_statement_timeout_is_the_time_left_and_ends_with_the_transaction(
        pool: ConnectionPool[Any]) -> None:
    with deadline_scope(2.0), DeadlinePool(pool).connection() as conn:
        value = statement_timeout(conn)
        assert value.endswith("ms") or value.endswith("s")
        millis = int(value[:-2]) if value.endswith("ms") else int(value[:-1]) * 1000
        assert 1500 <= millis <= 2000
    with pool.connection() as conn:  # the next user of the connection (a worker, say)
        assert statement_timeout(conn) == "0"


def test_a_slow_statement_is_cancelled_at_the_deadline(pool: ConnectionPool[Any]) -> None:
    started = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled):
        with deadline_scope(0.8), DeadlinePool(pool).connection() as conn:
            conn.execute("SELECT pg_sleep(10)")
    assert 0.6 < time.monotonic() - started < 2.5


def test_statements_together_never_run_past_the_deadline(pool: ConnectionPool[Any]) -> None:
    """Each statement alone fits the budget; together they do not: the deadline holds."""
    started, done = time.monotonic(), []
    with pytest.raises(psycopg.errors.QueryCanceled):
        with deadline_scope(1.0), DeadlinePool(pool).connection() as conn:
            for _ in range(5):
                conn.execute("SELECT pg_sleep(0.4)")
                done.append(time.monotonic() - started)
    assert len(done) == 2  # the third is cancelled at 1.0 s, not allowed another 1.0 s
    assert time.monotonic() - started < 2.0


def test_nothing_is_committed_when_the_deadline_cancels(pool: ConnectionPool[Any]) -> None:
    with pool.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS deadline_probe (v int)")
        conn.execute("TRUNCATE deadline_probe")
    with pytest.raises(psycopg.errors.QueryCanceled):
        with deadline_scope(0.5), DeadlinePool(pool).connection() as conn:
            conn.execute("INSERT INTO deadline_probe VALUES (1)")
            conn.execute("SELECT pg_sleep(5)")
    with pool.connection() as conn:
        row = conn.execute("SELECT count(*) FROM deadline_probe").fetchone()
        conn.execute("DROP TABLE deadline_probe")
    assert row is not None and row[0] == 0


def test_checkout_waits_only_the_time_left(pool: ConnectionPool[Any]) -> None:
    """The pool's own timeout is 20 s; a request with 0.7 s left gives up after 0.7 s."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pool.connection():
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5)
        started = time.monotonic()
        with pytest.raises(PoolTimeout), deadline_scope(0.7):
            with DeadlinePool(pool).connection():
                pass
        assert 0.5 < time.monotonic() - started < 2.0
    finally:
        release.set()
        holder.join()


def test_a_spent_deadline_makes_no_call(pool: ConnectionPool[Any]) -> None:
    with deadline_scope(0.01):
        time.sleep(0.05)
        with pytest.raises(DeadlineExceeded), DeadlinePool(pool).connection():
            pass
