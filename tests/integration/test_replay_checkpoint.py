"""The replay checkpoint tables on the real PostgreSQL: guard rows saved per batch and folded
back on resume (also over rows an older version wrote to ``replay_guard``), cleared with the run."""

from __future__ import annotations

import psycopg
import pytest

from casestream.replay import checkpoint
from tests.integration.test_replay_support import private_database


def test_guard_batches_fold_in_order_over_legacy_rows(pg_url: str) -> None:
    with private_database(pg_url) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        checkpoint.ensure_schema(conn)
        checkpoint.ensure_schema(conn)  # idempotent
        with conn.transaction():
            checkpoint.start_run(conn, "p", "00000000-0000-4000-8000-000000000001",
                                 "earliest", "now", ("t_shadow",))
            conn.execute("INSERT INTO replay_guard VALUES ('p', 'case', 'A', 1), ('p', 'case', 'Z', 9),"
                         " ('other', 'case', 'A', 7)")
        with conn.transaction(), conn.pipeline():
            checkpoint.save(conn, "p", {("topic", 0): 10}, {("case", "A"): 2, ("case", "B"): 1}, 3)
        with conn.transaction():
            checkpoint.save(conn, "p", {("topic", 0): 12, ("topic", 1): 4}, {("case", "A"): 3}, 1)
            checkpoint.save(conn, "p", {("topic", 1): 5}, {}, 0)
        assert checkpoint.load_guard(conn, "p") == {("case", "A"): 3, ("case", "B"): 1,
                                                    ("case", "Z"): 9}
        assert checkpoint.load_offsets(conn, "p") == {("topic", 0): 12, ("topic", 1): 5}
        assert checkpoint.load_run(conn, "p").events_applied == 4
        with conn.transaction():
            checkpoint.clear(conn, "p")
        assert checkpoint.load_guard(conn, "p") == {} and checkpoint.load_run(conn, "p") is None
        assert checkpoint.load_guard(conn, "other") == {("case", "A"): 7}


def test_secondary_indexes_are_deferred_and_restored(pg_url: str) -> None:
    with private_database(pg_url) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        checkpoint.ensure_schema(conn)
        conn.execute("CREATE TABLE s (id uuid PRIMARY KEY, k text UNIQUE, a text, b int)")
        conn.execute("CREATE INDEX s_a_b ON s (a, b DESC)")
        conn.execute("CREATE INDEX ON s (b) WHERE b > 0")
        before = sorted(conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 's'")
                        .fetchall())
        with conn.transaction():
            checkpoint.start_run(conn, "p", "00000000-0000-4000-8000-000000000002",
                                 "earliest", "now", ("s",))
            deferred = checkpoint.defer_indexes(conn, "p", ("s",))
        assert len(deferred) == 2 and all(d.startswith("CREATE INDEX") for d in deferred)
        left = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 's'")}
        assert left == {"s_pkey", "s_k_key"}  # unique ones stay: ON CONFLICT needs them
        with conn.transaction():
            assert checkpoint.restore_indexes(conn, "p") == 2
        after = sorted(conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 's'")
                       .fetchall())
        assert after == before
        with conn.transaction():
            assert checkpoint.restore_indexes(conn, "p") == 0  # nothing left to restore
