"""The relay under a held vacuum horizon (``xmin``), on real PostgreSQL and Kafka.

A read-only REPEATABLE READ transaction left open in another session keeps every row version
it might still see: the ``outbox_pending_idx`` entries of rows published after it began can
neither be vacuumed nor marked dead, so a claim that scans the index from its start walks all
of them, every time, and its work grows with the hold. The claim floor
(``casestream.outbox.relay.floor``) starts the scan past them. The test writes a steady
stream while the horizon is held and measures, from ``pg_stat_user_indexes``, the index
entries read per scan of ``outbox_pending_idx`` early and late in the hold: it fails if the
late scans read many times more entries than the early ones or than a few seconds of events
(a claim from the start of the index), if the relay falls behind, or if the relay's
``postgres_xmin_horizon_age_seconds`` does not show the held transaction.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from casestream.outbox.admin import redrive
from casestream.outbox.relay import OutboxRelay, store
from casestream.outbox.relay.floor import ClaimFloor
from casestream.outbox.writer import OutboxWriter
from casestream.testing.relay import JsonCodec

from test_relay_support import (  # noqa: F401 - fixtures
    LoadWriter, RelayThread, base_dsn, bootstrap, dsn, env, settings, topic_prefix, wait_for, write,
)

HOLD_S = 24.0
EVENTS_PER_TXN = 10
PAUSE_S = 0.02  # ~300-400 events/s on this box


def _index_reads(dsn: str) -> tuple[int, int]:
    """(idx_scan, idx_tup_read) of the schema's ``outbox_pending_idx`` (a fresh statistics
    snapshot: autocommit, one statement)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT idx_scan, idx_tup_read FROM pg_stat_user_indexes "
            "WHERE indexrelname = 'outbox_pending_idx' AND schemaname = current_schema()").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _per_scan(a: tuple[int, int], b: tuple[int, int]) -> float:
    scans = b[0] - a[0]
    assert scans > 0, "no scan of outbox_pending_idx in the window"
    return (b[1] - a[1]) / scans


def test_a_held_xmin_does_not_make_each_claim_walk_the_rows_published_since(
        dsn: str, base_dsn: str, bootstrap: str, topic_prefix: str) -> None:
    holder = psycopg.connect(base_dsn, autocommit=False)
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    holder.execute("SELECT 1")  # the snapshot is taken: xmin held until the rollback
    seen: list[float] = []
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix),
                        "xmin", on_metrics=lambda m: seen.append(m["postgres_xmin_horizon_age_seconds"]))
    rt = RelayThread(relay)
    writer = LoadWriter(dsn, per_txn=EVENTS_PER_TXN, aggregates=200, prefix="xm-", seed=38,
                        pause_s=PAUSE_S)
    try:
        started = time.monotonic()
        time.sleep(HOLD_S / 3)
        early_from = _index_reads(dsn)
        time.sleep(3.0)
        early_to = _index_reads(dsn)
        time.sleep(max(0.0, started + HOLD_S - 3.0 - time.monotonic()))
        late_from = _index_reads(dsn)
        late_from_at = time.monotonic()
        time.sleep(3.0)
        late_to = _index_reads(dsn)
        held_for = time.monotonic() - started
        written = writer.close()
        rate = written / held_for
        wait_for(lambda: _pending(dsn) == 0, timeout_s=20, what="every row published")
        lag = _lag(dsn)
    finally:
        writer.stop.set()
        holder.rollback()
        holder.close()
        rt.close()
    early, late = _per_scan(early_from, early_to), _per_scan(late_from, late_to)
    print(f"held {held_for:.0f} s, {written} events ({rate:.0f}/s); pending-index entries read per "
          f"scan: early {early:.0f}, late {late:.0f}; commit->publish p50 {lag[0]:.3f} s, "
          f"p99 {lag[1]:.3f} s; xmin age seen {max(seen, default=0):.1f} s")
    # A scan from the index's start reads every row published since the hold began (~22 s of
    # events late in the hold); from the floor, the rows since the lowest pending one when the
    # floor last advanced: its two steps plus the relay's in-flight window, which grows to
    # several seconds when the machine is loaded (9.4 s measured under a full parallel suite).
    from_start = rate * (late_from_at - started)
    assert late < from_start / 2, (early, late, rate, from_start)
    assert late < 3 * early + 2000, (early, late)
    assert lag[1] < 5.0, lag
    assert max(seen, default=0) >= HOLD_S / 2, seen


def _pending(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0])


def _lag(dsn: str) -> tuple[float, float]:
    """p50 and p99 of ``published_at - created_at`` (commit -> Kafka timestamp), seconds."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), "
            "percentile_cont(0.99) WITHIN GROUP (ORDER BY d) FROM ("
            "SELECT extract(epoch FROM published_at - created_at) AS d FROM outbox "
            "WHERE status = 'published') AS x").fetchone()
    assert row is not None and row[0] is not None
    return float(row[0]), float(row[1])


def _advance_fully(conn: psycopg.Connection, floor: ClaimFloor) -> None:
    """Run the floor's steps three times over (interval 0: each call is due)."""
    for _ in range(3):
        floor.step(conn, time.monotonic())


def test_the_floor_never_passes_a_row_whose_transaction_may_still_commit(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as late:
        with late.transaction():
            write(dsn, [env("fl-a", 1)])
            # an open writing transaction: its row has a number and no commit yet
            OutboxWriter(JsonCodec()).append(late, [env("fl-late", 1)])
            late_seq = int(late.execute("SELECT max(seq) FROM outbox").fetchone()[0])
            write(dsn, [env("fl-b", 1)])
            conn.execute("UPDATE outbox SET status = 'published' WHERE status = 'pending'")
            floor = ClaimFloor(interval_s=0.0)
            for _ in range(3):
                _advance_fully(conn, floor)
            assert floor.value <= late_seq, (floor.value, late_seq)
        # committed now: claimed although rows above it were published long ago
        rows = store.claim(conn, range(32), 100, stored_floor=True)
        assert [r.aggregateid for r in rows] == ["fl-late"]
        conn.execute("UPDATE outbox SET status = 'published' WHERE status = 'pending'")
        _advance_fully(conn, floor)
        assert floor.value > late_seq


def test_a_redriven_row_below_the_floor_is_claimed_before_its_aggregates_later_rows(dsn: str) -> None:
    write(dsn, [env("rd-a", 1), env("rd-b", 1)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET status = 'failed', attempts = 1 WHERE aggregateid = 'rd-a'")
        conn.execute("UPDATE outbox SET status = 'published' WHERE aggregateid = 'rd-b'")
        write(dsn, [env("rd-a", 2)])
        floor = ClaimFloor(interval_s=0.0)
        _advance_fully(conn, floor)
        failed_seq = int(conn.execute("SELECT seq FROM outbox WHERE aggregateid = 'rd-a' "
                                      "AND aggregate_version = 1").fetchone()[0])
        assert floor.value > failed_seq  # only pending rows hold the floor back
        assert store.claim(conn, range(32), 100, stored_floor=True) == []  # held behind the failed row
        assert redrive(dsn, None) == 1
        rows = store.claim(conn, range(32), 100, stored_floor=True)
        assert [(r.aggregateid, r.seq) for r in rows][:1] == [("rd-a", failed_seq)], rows
