"""Outbox relay guarantees against the real PostgreSQL and Kafka.

Every test has its own schema and topics. Each would fail if its guarantee broke: e.g. a
sequence-watermark relay fails the late-commit test, a relay that marks rows before the
delivery report loses the crashed batch, a poison row that blocks the batch fails the
poison test, and two instances producing one aggregate fail the ordering test.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import psycopg
import pytest

from tests.support.waiting import run_threads

from casestream.errors import ConcurrencyError
from casestream.outbox.writer import OutboxWriter
from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import FakeEnvelope, JsonCodec, read_topics

from test_relay_support import (  # noqa: F401 - fixtures
    RelayThread, base_dsn, bootstrap, check_order, count_status, dsn, env, run_until_idle,
    settings, topic_prefix, wait_for, write,
)


class SimulatedCrash(Exception):
    pass


def test_late_commit_is_published(dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """tx1 inserts first (lower seq) and commits after tx2's row was already published."""
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix), "late")
    try:
        e1, e2 = env("late-1", 1), env("late-2", 1)
        tx1 = psycopg.connect(dsn)
        OutboxWriter(JsonCodec()).append(tx1, [e1])  # open transaction, not committed
        write(dsn, [e2])
        assert run_until_idle(relay) == 1
        tx1.commit()
        tx1.close()
        assert run_until_idle(relay) == 1
        with psycopg.connect(dsn) as conn:
            seqs = dict(conn.execute("SELECT aggregateid, seq FROM outbox").fetchall())
        assert seqs["late-1"] < seqs["late-2"]  # the late row really had the lower number
        recs = read_topics(bootstrap, [topic_prefix + "case"], expected=2, timeout_s=30)
        assert sorted(r.headers["id"].decode() for r in recs) == sorted([e1.event_id, e2.event_id])
    finally:
        relay.close()


def test_crash_between_produce_and_bookkeeping_redelivers_same_id(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    envs = [env(f"crash-{i % 5}", i // 5 + 1) for i in range(50)]
    write(dsn, envs)

    def crash(stage: str) -> None:
        if stage == "delivered":
            raise SimulatedCrash("killed after the delivery reports, before marking")

    first = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix, lease_s=2.0),
                        "crashy", fault_hook=crash)
    with pytest.raises(SimulatedCrash):
        first.run_once()
    first._abandon()  # the process is gone: no flush of bookkeeping, leases not released
    assert count_status(dsn) == {"pending": 50}

    second = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix, lease_s=2.0),
                         "survivor")
    try:
        # The dead instance's leases expire after lease_s; then the survivor takes over.
        deadline = time.monotonic() + 10
        published = 0
        while published < 50 and time.monotonic() < deadline:
            published += second.run_once()
            time.sleep(0.2)
        assert published == 50
        assert count_status(dsn) == {"published": 50}
    finally:
        second.close()
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=100, timeout_s=30)
    expected = defaultdict(list)
    for e in envs:
        expected[(topic_prefix + "case", e.aggregate_id)].append(e.event_id)
    stats = check_order(recs, expected, allow_duplicates=True)
    assert stats["duplicates"] == 50  # the crashed batch was on Kafka already: same ids again


def test_poison_row_fails_with_reason_and_holds_back_only_its_aggregate(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """1,000 events; one is larger than message.max.bytes. It is marked failed with the
    reason; the other 999 (later events of other aggregates included) are published; a
    later event of the poisoned aggregate waits; after re-drive (with a producer that
    accepts the size) both go out in order."""
    envs: list[FakeEnvelope] = []
    version: dict[str, int] = defaultdict(int)
    rng = random.Random(3)
    for _ in range(999):
        agg = f"p-{rng.randrange(100)}"
        version[agg] += 1
        envs.append(env(agg, version[agg]))
    poison = env("p-poison", 1, size=200_000)
    envs.insert(400, poison)
    for i in range(0, 1000, 100):
        write(dsn, envs[i:i + 100])
    small = {"bootstrap.servers": bootstrap, "message.max.bytes": 100_000}
    relay = OutboxRelay(dsn, small, settings(topic_prefix, batch_size=300), "poison")
    try:
        assert run_until_idle(relay) == 999
        with psycopg.connect(dsn) as conn:
            st, err, attempts = conn.execute(
                "SELECT status, last_error, attempts FROM outbox WHERE id = %s",
                (poison.event_id,)).fetchone()
        assert (st, attempts) == ("failed", 1)
        assert "MSG_SIZE_TOO_LARGE" in err
        assert relay.metrics.failed_total == 1
        later = env("p-poison", 2)
        write(dsn, [later, env("p-other", 1)])
        assert run_until_idle(relay) == 1  # only p-other; p-poison v2 is held back
        assert count_status(dsn) == {"published": 1000, "failed": 1, "pending": 1}
    finally:
        relay.close()

    from click.testing import CliRunner

    from casestream.cli.outbox import outbox

    out = CliRunner().invoke(outbox, ["list", "--dsn", dsn, "--status", "failed"])
    assert out.exit_code == 0 and poison.event_id in out.output and "MSG_SIZE_TOO_LARGE" in out.output
    out = CliRunner().invoke(outbox, ["redrive", "--dsn", dsn, poison.event_id])
    assert out.exit_code == 0 and "re-driven: 1" in out.output

    big = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix), "big")
    try:
        wait_for(lambda: big.run_once() >= 0 and count_status(dsn) == {"published": 1002},
                 timeout_s=15, what="re-driven row and the held-back one published")
    finally:
        big.close()
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=1002, timeout_s=30)
    p = sorted((r for r in recs if r.key == "p-poison"), key=lambda r: r.offset)
    assert [r.headers["id"].decode() for r in p] == [poison.event_id, later.event_id]


def test_notify_wakes_the_relay_within_milliseconds(dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """With a 5 s polling fallback, commit -> delivered well under a second means NOTIFY works."""
    relay = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                    settings(topic_prefix, poll_interval_s=5.0, lease_s=30.0), "notify"))
    try:
        wait_for(lambda: len(relay.relay.shards) == 32, 10, "leases")
        write(dsn, [env("n-0", 1)])  # warm-up: producer connected, metadata known
        wait_for(lambda: count_status(dsn).get("published", 0) == 1, 10, "warm-up")
        time.sleep(0.5)  # let the relay go idle (waiting on LISTEN)
        latencies = []
        for i in range(5):
            t0 = time.monotonic()
            write(dsn, [env("n-1", i + 1)])
            wait_for(lambda: count_status(dsn).get("published", 0) == i + 2, 5, "publish", step=0.005)
            latencies.append(time.monotonic() - t0)
            time.sleep(0.3)
        assert max(latencies) < 1.0, latencies
    finally:
        relay.close()


def test_published_rows_are_removed_after_retention(dsn: str, bootstrap: str, topic_prefix: str) -> None:
    write(dsn, [env(f"r-{i}", 1) for i in range(20)])
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                        settings(topic_prefix, published_retention_s=1.0, cleanup_interval_s=0.1), "ret")
    try:
        assert run_until_idle(relay) == 20
        assert count_status(dsn) == {"published": 20}
        time.sleep(1.5)
        relay.run_once()
        relay._next_cleanup = 0
        relay.run_once()
        assert count_status(dsn) == {}
        assert relay.metrics.cleaned_total == 20
    finally:
        relay.close()
    immediate = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                            settings(topic_prefix, published_retention_s=0), "ret0")
    try:
        write(dsn, [env("r-x", 1)])
        assert run_until_idle(immediate) == 1
        assert count_status(dsn) == {}
    finally:
        immediate.close()


def test_pending_scan_uses_the_partial_index(dsn: str) -> None:
    """The claim query reads the pending index, not the whole (growing) table."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("""
            INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version,
                                occurred_at, status, published_at)
            SELECT gen_random_uuid(), 'case', 'a' || (g % 1000), 'T', '\\x00', g, now(),
                   'published', now()
            FROM generate_series(1, 50000) g""")
        write(dsn, [env("fresh", 1)])
    with psycopg.connect(dsn) as conn:
        conn.execute("ANALYZE outbox")
        from casestream.outbox.relay.store import _CLAIM

        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + _CLAIM, {"shards": list(range(32)), "limit": 1000, "inflight": list(range(1000)),
                                  "busy": [f"a{i}" for i in range(300)]}).fetchall())
    assert "outbox_pending_idx" in plan, plan


def test_three_relays_fifty_writers_every_event_once_in_order(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """50 writer threads x 40 events over 200 aggregates (optimistic versions), 3 relay
    instances publishing concurrently: every event on the topic once, per key in version order."""
    relays = [RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                      settings(topic_prefix, batch_size=200, lease_s=3.0), f"r{i}"))
              for i in range(3)]
    try:
        wait_for(lambda: sorted(len(r.relay.shards) for r in relays) in ([10, 11, 11],),
                 timeout_s=20, what="3 relays sharing the 32 shards")
        writer = OutboxWriter(JsonCodec())
        written: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
        lock = threading.Lock()
        errors: list[BaseException] = []

        def writer_thread(seed: int) -> None:
            rng = random.Random(seed)
            try:
                with psycopg.connect(dsn) as conn:
                    done = 0
                    while done < 40:
                        agg = f"w-{rng.randrange(200)}"
                        row = conn.execute("SELECT version FROM outbox_aggregate_version "
                                           "WHERE aggregatetype = 'case' AND aggregateid = %s",
                                           (agg,)).fetchone()
                        conn.commit()
                        current = row[0] if row else 0
                        e = env(agg, current + 1)
                        try:
                            with conn.transaction():
                                writer.append(conn, [e], expected_version=current)
                        except ConcurrencyError:
                            continue
                        with lock:
                            written[(topic_prefix + "case", agg)][e.aggregate_version] = e.event_id
                        done += 1
            except BaseException as ex:  # noqa: BLE001
                errors.append(ex)

        run_threads(writer_thread, 50)
        assert errors == []
        wait_for(lambda: count_status(dsn) == {"published": 2000}, 60, "all 2000 published")
    finally:
        for r in relays:
            r.close()
    expected = {k: [v[i] for i in sorted(v)] for k, v in written.items()}
    assert sum(map(len, expected.values())) == 2000
    for ids_by_version in written.values():
        assert sorted(ids_by_version) == list(range(1, len(ids_by_version) + 1))  # no gaps
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=2000, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=False)
    assert stats == {"records": 2000, "duplicates": 0}
    assert all(r.relay.metrics.published_total > 0 for r in relays), \
        [r.relay.metrics.published_total for r in relays]


class ReportsSwallowed:
    """A real producer whose delivery reports never reach the relay: a stalled producer."""

    def __init__(self, producer) -> None:
        self._producer = producer

    def produce(self, topic: str, **kw) -> None:
        kw.pop("on_delivery", None)
        self._producer.produce(topic, **kw)

    def __getattr__(self, name: str):
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


def test_a_stalled_producer_is_recreated_and_its_rows_produced_again_in_order(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """The first producer sends every message but never reports one; after report_timeout_s
    the relay recreates it and the new producer publishes the same rows (same ids, in order
    per aggregate; the first copies are on the topic too), then later rows go out at once."""
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                        settings(topic_prefix, report_timeout_s=2.0), "stalled")
    relay._producer = ReportsSwallowed(relay._producer)
    first = [env(f"stall-{a}", v) for v in (1, 2) for a in range(4)]
    write(dsn, first)
    thread = RelayThread(relay)
    try:
        wait_for(lambda: count_status(dsn) == {"published": 8}, 30, "rows published after the stall")
        m = relay.metrics
        assert m.report_timeouts_total == 1 and m.producer_restarts_total == 1, m.snapshot()
        later = [env(f"stall-{a}", 3) for a in range(4)]
        write(dsn, later)
        wait_for(lambda: count_status(dsn) == {"published": 12}, 10, "later rows published")
        assert m.report_timeouts_total == 1, m.snapshot()
    finally:
        thread.close()
    expected = {(topic_prefix + "case", f"stall-{a}"): [e.event_id for e in (*first, *later)
                                                       if e.aggregate_id == f"stall-{a}"]
                for a in range(4)}
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=20, timeout_s=30)
    stats = check_order(recs, expected, allow_duplicates=True)
    assert stats == {"records": 20, "duplicates": 8}, stats
