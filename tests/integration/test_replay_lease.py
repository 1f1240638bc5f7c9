"""The replay lease (a row, not a session lock) against the real PostgreSQL: one holder at a
time, taken over once expired, and a holder that lost it is told at its next check and at
release (never released silently)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from casestream.replay import ReplayError
from casestream.replay.lease import ReplayLease
from tests.integration.test_replay_support import private_database


@pytest.fixture
def dsn(pg_url: str) -> Iterator[str]:
    with private_database(pg_url, "lease") as d:
        yield d


def test_one_holder_then_takeover_after_expiry_and_the_loser_is_told(dsn: str) -> None:
    a, b = ReplayLease(dsn, "p", ttl_s=0.6), ReplayLease(dsn, "p", ttl_s=0.6)
    a.acquire()
    with pytest.raises(ReplayError, match="another replay of p is running"):
        b.acquire()
    time.sleep(1.0)  # renewed meanwhile: still a's
    with pytest.raises(ReplayError):
        b.acquire()
    a._stop.set()  # a stops renewing (a paused or partitioned process) and its lease expires
    a._thread.join(5)
    time.sleep(0.8)
    b.acquire()
    a.lost = None
    with pytest.raises(ReplayError, match="lost before release"):
        a.release()
    b.release()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM replay_lease").fetchone()[0] == 0


def test_a_renewal_that_finds_another_holder_marks_the_lease_lost(dsn: str) -> None:
    a = ReplayLease(dsn, "q", ttl_s=0.6)
    a.acquire()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE replay_lease SET holder = 'someone else' WHERE projection = 'q'")
    time.sleep(0.5)
    with pytest.raises(ReplayError, match="lost its lease"):
        a.check()
    with pytest.raises(ReplayError, match="lost before release"):
        a.release()
