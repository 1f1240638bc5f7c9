"""bench/peers: casestream beside what a team would otherwise use, same events, same guarantees.

One invocation, rounds alternating, the same events (``--events`` over ``--aggregates`` on one
``--partitions`` topic, CaseOpened v3 through the real ``EnvelopeCodec`` and registry), every
connection with ``synchronous_commit=on`` (libpq ``PGOPTIONS``; ``--fast`` runs off, labelled),
in a database of the bench's own (``common.own_database``, dropped at the end).

Consumer group (``consumer``) -- inbox row + version guard + one projection upsert per event:

* ``b4``: the SQL alone, batched per ``--batch-size``, no Kafka (``bench/consumer.py``'s B4);
* ``b2``: raw ``Consumer.consume`` + fastavro decode, no database (``bench/consumer.py``'s B2);
* ``cs_batch`` / ``cs_event``: casestream ``ConsumerRuntime`` with a batch handler
  (``on_batch``, ``executemany``) / a per-event handler on ``ctx.cursor``;
* ``hand``: a hand-rolled confluent-kafka + psycopg loop: ``consume(batch)``, decode with the
  same codec, one transaction per batch (inbox claim ``ON CONFLICT DO NOTHING RETURNING``, guard
  read, projection ``executemany`` of the events above their guard, guard upsert), then an
  asynchronous offset commit;
* ``fs_batch``: FastStream (aiokafka broker) ``batch=True``, ``AckPolicy.MANUAL``, the same
  four statements on a psycopg ``AsyncConnection`` in one transaction per batch, then
  ``await msg.ack()`` (the manual acknowledgement of FastStream's Kafka docs);
* ``fs_msg``: FastStream per-message subscriber, one transaction per message, ``msg.ack()``
  after it; run on the first ``--per-message-events`` of the topic (its rate is tens of times
  lower; its figure is the rate over those).

Keyed group (``keyed``) -- a handler that waits ``--wait-ms`` (5 ms, an external call), order
per key checked, at each C of ``--concurrency``:

* ``cs_thread`` / ``cs_coro``: casestream ``key_concurrency=C`` with a plain / coroutine
  handler; inbox and guard rows in the unit's transaction (``bench/keyparallel.py``'s run);
* ``pyr``: Pyrallel Consumer (async engine, ``key_hash`` ordering, ``worker_pool_size`` and
  ``max_in_flight`` = C), no database: the handler awaits the wait and records the version;
* ``pyr_db``: the same with the inbox claim + guard read + guard upsert in one transaction
  per event on a psycopg ``AsyncConnectionPool`` of C connections.

Groups ``relay`` and ``replay`` run ``bench/relay.py`` (relay x B5, commit -> topic p99 at
1,000 events/s) and ``bench/replay.py`` for each projection (x B2); ``debezium`` runs
``bench/debezium.py`` (the relay beside Debezium; needs ``deploy/infra.sh up connect``, not run
without it). The run ends with the floors its figures are held to (:func:`floors`).

Every variant's result is checked before its figure counts (``check_consumer`` /
``check_order``): projection rows and versions, inbox rows, guard rows at the last version of
each aggregate (order per key). Printed: events/s, x B4 (consumer) or x C / wait (keyed),
process CPU us per event (``time.process_time``, every thread of this process: librdkafka's
too; PostgreSQL's CPU is not in it), load average; a final ``BENCH {...}`` JSON line.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/peers.py [--quick] [--only consumer,keyed,relay,replay,debezium]
        [--skip ...]
        [--events 40000] [--aggregates 4000] [--partitions 4] [--batch-size 500] [--rounds 3]
        [--concurrency 8,16,32,64] [--wait-ms 5] [--keyed-seconds 3] [--per-message-events 2000]

Peers: ``pip install -r bench/requirements-peers.txt`` (FastStream, Pyrallel Consumer; see
bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUPS = ("consumer", "keyed", "relay", "replay", "debezium")
PROJECTIONS = ("case.dashboard", "audit.timeline", "decision.statistics")
CONSUMER_VARIANTS = ("b4", "b2", "cs_batch", "cs_event", "hand", "fs_batch", "fs_msg")
KEYED_VARIANTS = ("cs_thread", "cs_coro", "pyr", "pyr_db")
LABELS = {
    "b4": "B4: the SQL alone, batched, no Kafka",
    "b2": "B2: consume + fastavro decode, no database",
    "cs_batch": "casestream ConsumerRuntime, batch handler",
    "cs_event": "casestream, per-event handler (ctx.cursor)",
    "hand": "hand-rolled confluent-kafka + psycopg loop, one tx per batch",
    "fs_batch": "FastStream batch=True, AckPolicy.MANUAL, inbox/guard by hand",
    "fs_msg": "FastStream per-message subscriber, one tx per message",
    "cs_thread": "casestream key_concurrency, thread handler (inbox + guard)",
    "cs_coro": "casestream key_concurrency, coroutine handler (inbox + guard)",
    "pyr": "Pyrallel Consumer async, no database",
    "pyr_db": "Pyrallel + the same inbox/guard transaction per event",
}

CLAIM = ("INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type, aggregate_id,"
         " aggregate_version) SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::text[],"
         " %s::text[], %s::bigint[]) ON CONFLICT DO NOTHING RETURNING event_id")
GUARD_READ = ("SELECT aggregate_id, last_version FROM consumer_version_guard WHERE consumer = %s"
              " AND aggregate_type = 'case' AND aggregate_id = ANY(%s::text[])")
GUARD_UPSERT = ("INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id,"
                " last_version) SELECT %s, 'case', * FROM unnest(%s::text[], %s::bigint[])"
                " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
                " SET last_version = EXCLUDED.last_version, updated_at = now()")


class ResultError(AssertionError):
    """A variant's database state or delivery order is not what its events must produce."""


# --------------------------------------------------------------------------- arguments

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The bench's arguments; ``--quick`` shrinks every size to a run under a minute (one round,
    C = 8 and 32, no Debezium unless asked by ``--only``). ``groups`` is the selected groups
    in run order.

    Raises:
        SystemExit: an unknown group in ``--only`` / ``--skip`` (argparse's exit status 2).
    """
    from common import infra_arguments

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--aggregates", type=int, default=4_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of every variant")
    ap.add_argument("--per-message-events", type=int, default=2_000,
                    help="events the FastStream per-message subscriber is timed over")
    ap.add_argument("--concurrency", default="8,16,32,64", help="keyed mode: C values")
    ap.add_argument("--wait-ms", type=float, default=5.0, help="keyed mode: the handler's wait")
    ap.add_argument("--keyed-seconds", type=float, default=3.0,
                    help="keyed mode: events per run = C / wait x this many seconds")
    ap.add_argument("--keyed-aggregates", type=int, default=2_000,
                    help="keyed mode: aggregates (keys), several versions each so order shows")
    ap.add_argument("--pyrallel-events", type=int, default=10_000,
                    help="keyed mode: at most this many events per Pyrallel run without a database")
    ap.add_argument("--pyrallel-db-events", type=int, default=3_000,
                    help="keyed mode: at most this many per Pyrallel run with the database")
    ap.add_argument("--only", default="", help=f"comma-separated groups of {', '.join(GROUPS)}")
    ap.add_argument("--skip", default="", help="comma-separated groups to leave out")
    ap.add_argument("--variants", default="",
                    help="comma-separated variants to run (default all of the selected groups)")
    ap.add_argument("--debezium-args", default="--events 50000 --rounds 2",
                    help="arguments for bench/debezium.py")
    ap.add_argument("--relay-args", default="--events 50000 --seconds 10",
                    help="arguments for bench/relay.py (relay x B5, commit -> topic p99)")
    ap.add_argument("--replay-args", default="--events 50000",
                    help="arguments for bench/replay.py, run once per projection")
    ap.add_argument("--quick", action="store_true", help="small sizes: a run under a minute")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off (labelled: not production durability)")
    infra_arguments(ap)
    args = ap.parse_args(argv)
    chosen = [g for g in args.only.split(",") if g] or (
        ["consumer", "keyed"] if args.quick else list(GROUPS))
    skipped = [g for g in args.skip.split(",") if g]
    unknown = sorted(set(chosen + skipped) - set(GROUPS))
    if unknown:
        ap.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    args.groups = [g for g in GROUPS if g in chosen and g not in skipped]
    variants = [v for v in args.variants.split(",") if v]
    bad = sorted(set(variants) - set(CONSUMER_VARIANTS) - set(KEYED_VARIANTS))
    if bad:
        ap.error(f"unknown variant(s) {', '.join(bad)}")
    args.variant_set = set(variants) or set(CONSUMER_VARIANTS) | set(KEYED_VARIANTS)
    if args.quick:
        args.events, args.aggregates, args.rounds = 6_000, 600, 1
        args.per_message_events, args.keyed_seconds = 300, 1.0
        args.pyrallel_events, args.pyrallel_db_events = 3_000, 600
        if args.concurrency == "8,16,32,64":
            args.concurrency = "8,32"
    args.levels = [int(c) for c in args.concurrency.split(",") if c]
    if args.events % args.aggregates:
        ap.error("--events must be a multiple of --aggregates (every aggregate ends at one version)")
    return args


# --------------------------------------------------------------------------- result checks

@dataclass
class ConsumerState:
    """What a consumer variant left in the database (read by :func:`read_state`)."""

    projection_rows: int
    projection_max_version: int
    inbox_rows: int
    guard_rows: int
    off_last_version: int  # aggregates whose projection row is not at their last inbox version


def check_consumer(state: ConsumerState, *, events: int, aggregates: int, full: bool,
                   inbox: bool = True) -> None:
    """Fail unless ``state`` is what ``events`` applied once each produce: with ``full`` (the
    whole topic) one projection row per aggregate at version ``events // aggregates``; always
    every projection row at its aggregate's last inbox version, and (``inbox``) as many inbox
    rows as events and a guard row per projection row.

    Raises:
        ResultError: naming the first mismatch.
    """
    if full and (state.projection_rows, state.projection_max_version) != (
            aggregates, events // aggregates):
        raise ResultError(f"projection has {state.projection_rows} rows up to version "
                          f"{state.projection_max_version}, want {aggregates} at "
                          f"{events // aggregates}")
    if inbox and state.inbox_rows != events:
        raise ResultError(f"inbox holds {state.inbox_rows} rows, want {events}")
    if inbox and state.guard_rows != state.projection_rows:
        raise ResultError(f"{state.guard_rows} guard rows for {state.projection_rows} projection rows")
    if state.off_last_version:
        raise ResultError(f"{state.off_last_version} projection rows not at their last version")


def check_order(seen: dict[str, list[int]], *, events: int) -> None:
    """Fail unless the versions each key was handled in are 1, 2, 3... (order per key, none
    lost or doubled) and they add up to ``events``.

    Raises:
        ResultError: naming a key out of order or the count.
    """
    total = 0
    for key, versions in seen.items():
        if versions != list(range(1, len(versions) + 1)):
            raise ResultError(f"key {key}: handled versions {versions[:8]}... not 1, 2, 3...")
        total += len(versions)
    if total != events:
        raise ResultError(f"{total} events handled, want {events}")


def read_state(dsn: str, table: str, consumer: str) -> ConsumerState:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows, maxv = conn.execute(f"SELECT count(*), coalesce(max(version), 0) FROM {table}").fetchone()
        inbox = conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s",
                             (consumer,)).fetchone()[0]
        guard = conn.execute("SELECT count(*) FROM consumer_version_guard WHERE consumer = %s",
                             (consumer,)).fetchone()[0]
        off = conn.execute(
            f"SELECT count(*) FROM {table} p JOIN (SELECT aggregate_id, max(aggregate_version) v"
            " FROM consumer_inbox WHERE consumer = %s GROUP BY aggregate_id) i"
            " ON i.aggregate_id = p.case_id WHERE p.version <> i.v", (consumer,)).fetchone()[0]
    return ConsumerState(rows, maxv, inbox, guard, off)


# --------------------------------------------------------------------------- the SQL, by hand

def _claim_params(consumer: str, evs: Sequence[Any]) -> tuple[Any, ...]:
    return (consumer, [e.event_id for e in evs], [e.event_type for e in evs],
            [e.aggregate_type for e in evs], [e.aggregate_id for e in evs],
            [e.aggregate_version for e in evs])


def _to_apply(evs: Sequence[Any], claimed: set[str], guard: dict[str, int]) -> tuple[list[Any], dict[str, int]]:
    """The events to apply (claimed now, above their aggregate's guard, in order) and the new
    guard versions."""
    apply, last = [], {}
    for e in evs:
        if e.event_id not in claimed:
            continue
        if e.aggregate_version <= max(guard.get(e.aggregate_id, 0), last.get(e.aggregate_id, 0)):
            continue
        apply.append(e)
        last[e.aggregate_id] = e.aggregate_version
    return apply, last


def apply_sync(conn: Any, consumer: str, evs: Sequence[Any], upsert: str, row: Callable) -> int:
    """One transaction on ``conn`` (psycopg, autocommit): inbox claim, guard read, projection
    ``executemany`` and guard upsert for ``evs``. Returns the events applied."""
    with conn.transaction(), conn.cursor() as cur:
        claimed = {r[0] for r in cur.execute(CLAIM, _claim_params(consumer, evs)).fetchall()}
        if not claimed:
            return 0
        guard = dict(cur.execute(GUARD_READ, (consumer, list({e.aggregate_id for e in evs})))
                     .fetchall())
        apply, last = _to_apply(evs, claimed, guard)
        if apply:
            cur.executemany(upsert, [row(e) for e in apply])
            cur.execute(GUARD_UPSERT, (consumer, list(last), list(last.values())))
        return len(apply)


async def apply_async(conn: Any, consumer: str, evs: Sequence[Any], upsert: str,
                      row: Callable | None) -> int:
    """:func:`apply_sync` on a psycopg ``AsyncConnection``; ``row`` None: no projection
    statement (inbox and guard only)."""
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute(CLAIM, _claim_params(consumer, evs))
        claimed = {r[0] for r in await cur.fetchall()}
        if not claimed:
            return 0
        await cur.execute(GUARD_READ, (consumer, list({e.aggregate_id for e in evs})))
        guard = dict(await cur.fetchall())
        apply, last = _to_apply(evs, claimed, guard)
        if apply:
            if row is not None:
                await cur.executemany(upsert, [row(e) for e in apply])
            await cur.execute(GUARD_UPSERT, (consumer, list(last), list(last.values())))
        return len(apply)


# --------------------------------------------------------------------------- consumer variants

@dataclass
class Timed:
    """A variant's clock: events counted, seconds, process CPU seconds inside the clock."""

    events: int
    seconds: float
    cpu_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.events * 1e6


class _Clock:
    """Started at the first event handed to a handler, stopped at the n-th applied."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.cpu0 = 0.0
        self.applied = 0
        self.t_end = 0.0
        self.cpu_end = 0.0

    def start(self) -> None:
        if self.t0 is None:
            self.t0, self.cpu0 = time.perf_counter(), time.process_time()

    def add(self, k: int, n: int) -> bool:
        self.applied += k
        if self.applied >= n and not self.t_end:
            self.t_end, self.cpu_end = time.perf_counter(), time.process_time()
        return self.applied >= n

    def timed(self) -> Timed:
        assert self.t0 is not None
        return Timed(self.applied, self.t_end - self.t0, self.cpu_end - self.cpu0)


def hand_rolled(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                consumer: str, batch: int) -> Timed:
    """The loop a competent team writes with confluent-kafka and psycopg: one transaction per
    consumed batch, offsets committed (asynchronously) after it; the inbox makes a replayed
    batch harmless."""
    import psycopg
    from confluent_kafka import Consumer

    from consumer import UPSERT, _row

    upsert = UPSERT.format(t=table)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": consumer,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    clock = _Clock()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            done = False
            while not done:
                msgs = c.consume(batch, 0.2)
                if not msgs:
                    continue
                clock.start()
                evs = [codec.decode(m.value()) for m in msgs if m.error() is None]
                applied = apply_sync(conn, consumer, evs, upsert, _row)
                c.commit(asynchronous=True)
                done = clock.add(applied, n)
    finally:
        c.close()
    return clock.timed()


def faststream_run(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                   consumer: str, batch: int, *, per_message: bool) -> Timed:
    """FastStream's Kafka broker (aiokafka) with a subscriber as its docs show it: a group,
    ``AckPolicy.MANUAL`` and ``await msg.ack()`` after the transaction; ``batch=True`` with
    ``max_records`` = ``batch`` or one message per call. The database is psycopg's
    ``AsyncConnection`` (FastStream handlers are coroutines)."""
    return asyncio.run(_faststream(bootstrap, dsn, topic, n, codec, table, consumer, batch,
                                   per_message))


async def _faststream(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                      consumer: str, batch: int, per_message: bool) -> Timed:
    import psycopg
    from faststream import AckPolicy
    from faststream.kafka import KafkaBroker
    from faststream.kafka.annotations import KafkaMessage

    from consumer import UPSERT, _row

    upsert = UPSERT.format(t=table)
    broker = KafkaBroker(bootstrap, logger=None)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    clock, done = _Clock(), asyncio.Event()

    if per_message:
        @broker.subscriber(topic, group_id=consumer, auto_offset_reset="earliest",
                           ack_policy=AckPolicy.MANUAL)
        async def handle_one(body: bytes, msg: KafkaMessage) -> None:
            clock.start()
            applied = await apply_async(conn, consumer, [codec.decode(body)], upsert, _row)
            await msg.ack()
            if clock.add(applied, n):
                done.set()
    else:
        @broker.subscriber(topic, group_id=consumer, auto_offset_reset="earliest", batch=True,
                           max_records=batch, ack_policy=AckPolicy.MANUAL)
        async def handle_batch(bodies: list[bytes], msg: KafkaMessage) -> None:
            clock.start()
            applied = await apply_async(conn, consumer, [codec.decode(b) for b in bodies],
                                        upsert, _row)
            await msg.ack()
            if clock.add(applied, n):
                done.set()

    await broker.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=max(120.0, n / 50))
    finally:
        await broker.stop()
        await conn.close()
    return clock.timed()


def casestream_run(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                   consumer: str, batch: int, *, handler: str) -> Timed:
    """``bench/consumer.py``'s ``runtime_run`` (clock from the assignment), with its CPU."""
    from consumer import runtime_run

    cpu0 = time.process_time()
    secs, counted, stats = runtime_run(bootstrap, dsn, topic, n, codec, table, consumer, batch,
                                       handler=handler)
    # The runtime's start-up and shutdown are in this CPU figure; they are small against the
    # run but make it an upper bound.
    return Timed(counted, secs, time.process_time() - cpu0,
                 {"fast_batches": stats.fast_batches, "batches": stats.batches})


def b4_run(dsn: str, evs: Sequence[Any], table: str, consumer: str, batch: int) -> Timed:
    from consumer import b4_sql

    cpu0 = time.process_time()
    secs = b4_sql(dsn, list(evs), table, consumer, batch)
    return Timed(len(evs), secs, time.process_time() - cpu0)


def b2_run(bootstrap: str, topic: str, n: int, codec: Any, batch: int) -> Timed:
    from consumer import b2_consume_decode

    cpu0 = time.process_time()
    secs = b2_consume_decode(bootstrap, topic, n, codec, batch)
    return Timed(n, secs, time.process_time() - cpu0)


# --------------------------------------------------------------------------- keyed variants

def pyrallel_run(bootstrap: str, dsn: str | None, topic: str, n: int, codec: Any, consumer: str,
                 *, concurrency: int, wait_s: float) -> tuple[Timed, dict[str, list[int]]]:
    """Pyrallel Consumer's async engine, ``key_hash`` ordering, C = ``worker_pool_size`` =
    ``max_in_flight``; the worker awaits ``wait_s`` and (``dsn``) runs the inbox claim, guard
    read and guard upsert of its event in one transaction. Steady rate: events after the
    first 10 % to the n-th, as ``bench/keyparallel.py``. Returns the clock and the versions
    each key was handled in."""
    return asyncio.run(_pyrallel(bootstrap, dsn, topic, n, codec, consumer, concurrency, wait_s))


async def _pyrallel(bootstrap: str, dsn: str | None, topic: str, n: int, codec: Any,
                    consumer: str, concurrency: int, wait_s: float) -> tuple[Timed, dict[str, list[int]]]:
    from pyrallel_consumer.config import KafkaConfig
    from pyrallel_consumer.consumer import PyrallelConsumer
    from pyrallel_consumer.dto import ExecutionMode

    pool = None
    if dsn is not None:
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(dsn, min_size=concurrency, max_size=concurrency, open=False,
                                   kwargs={"autocommit": True})
        await pool.open(wait=True)
    cfg = KafkaConfig(BOOTSTRAP_SERVERS=bootstrap, CONSUMER_GROUP=consumer)
    cfg.dlq_enabled = False
    cfg.metrics.enabled = False
    pc = cfg.parallel_consumer
    pc.ordering_mode = "key_hash"
    pc.worker_pool_size = concurrency
    pc.execution.mode = ExecutionMode.ASYNC
    pc.execution.max_in_flight = concurrency
    pc.execution.max_retries = 1  # attempts in all: one, no retry
    seen: dict[str, list[int]] = {}
    done = asyncio.Event()
    marks: dict[str, float] = {}
    count = 0

    async def worker(item: Any) -> None:
        nonlocal count
        e = codec.decode(item.payload)
        await asyncio.sleep(wait_s)  # the external call
        if pool is not None:
            async with pool.connection() as conn:
                await apply_async(conn, consumer, [e], "", None)
        seen.setdefault(e.aggregate_id, []).append(e.aggregate_version)
        count += 1
        if count == n // 10:
            marks["t"], marks["cpu"] = time.perf_counter(), time.process_time()
        if count == n:
            marks["t_end"], marks["cpu_end"] = time.perf_counter(), time.process_time()
            done.set()

    pcons = PyrallelConsumer(cfg, worker, topic)
    await pcons.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=max(120.0, n / 20))
    finally:
        await pcons.stop()
        if pool is not None:
            await pool.close()
    steady = n - n // 10
    return Timed(steady, marks["t_end"] - marks["t"], marks["cpu_end"] - marks["cpu"]), seen


def casestream_keyed(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                     consumer: str, *, concurrency: int, wait_s: float, batch: int,
                     coroutine: bool) -> Timed:
    """``bench/keyparallel.py``'s run (steady rate after the first 10 %), then its order check:
    every aggregate's guard row at its last inbox version."""
    import psycopg

    from keyparallel import run

    secs, steady, stats, _busy, cpu_share = run(bootstrap, dsn, topic, n, codec, table, consumer,
                                                concurrency=concurrency, wait_s=wait_s,
                                                batch=batch, upsert_row=False, coroutine=coroutine)
    with psycopg.connect(dsn) as conn:
        last = dict(conn.execute("SELECT aggregate_id, max(aggregate_version) FROM consumer_inbox"
                                 " WHERE consumer = %s GROUP BY aggregate_id", (consumer,)).fetchall())
        got = dict(conn.execute("SELECT aggregate_id, last_version FROM consumer_version_guard"
                                " WHERE consumer = %s", (consumer,)).fetchall())
        inbox = conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s",
                             (consumer,)).fetchone()[0]
    wrong = sum(1 for agg, v in last.items() if got.get(agg) != v)
    if wrong:
        raise ResultError(f"{wrong} aggregates' guard rows not at their last version")
    if inbox < n:
        raise ResultError(f"inbox holds {inbox} rows, want at least {n}")
    seconds = (n - n // 10) / steady
    return Timed(n - n // 10, seconds, cpu_share * seconds)


def check_pyrallel_db(dsn: str, consumer: str, seen: dict[str, list[int]]) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        got = dict(conn.execute("SELECT aggregate_id, last_version FROM consumer_version_guard"
                                " WHERE consumer = %s", (consumer,)).fetchall())
        inbox = conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s",
                             (consumer,)).fetchone()[0]
    handled = sum(len(v) for v in seen.values())
    wrong = sum(1 for k, v in seen.items() if got.get(k) != v[-1])
    if wrong or inbox < handled:
        raise ResultError(f"pyrallel + database: {wrong} guard rows off their last version,"
                          f" inbox {inbox} rows for {handled} handled")


# --------------------------------------------------------------------------- the run

def main(argv: Sequence[str] | None = None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    args = parse_args(argv)
    from common import durability, own_database

    logging.basicConfig(level=logging.WARNING)
    # FastStream and Pyrallel log every start, stop and commit at INFO
    for name in ("faststream", "aiokafka", "pyrallel_consumer"):
        logging.getLogger(name).setLevel(logging.ERROR)
    label = durability(args.fast)
    results: dict[str, Any] = {}
    if "consumer" in args.groups or "keyed" in args.groups:
        with own_database(args.dsn, f"bench_peers_{uuid.uuid4().hex[:8]}") as dsn:
            args.dsn = dsn
            measure(args, label, results)
    for group, script, runs in (
            ("relay", "relay.py", [args.relay_args.split()]),
            ("replay", "replay.py", [[*args.replay_args.split(), "--projection", p]
                                     for p in PROJECTIONS])):
        if group in args.groups:
            recs = [run_bench(script, [*argv, *(["--fast"] if args.fast else [])]) for argv in runs]
            results[group] = recs[0] if group == "relay" else dict(zip(PROJECTIONS, recs))
    if "debezium" in args.groups:
        results["debezium"] = debezium(args)
    rows = floors(results)
    if rows:
        print("\n| floor | figure | met |\n| --- | --- | --- |")
        for name, figure, met in rows:
            print(f"| {name} | {figure} | {'yes' if met else '**no**'} |")
    results["floors"] = [{"floor": n, "figure": f, "met": m} for n, f, m in rows]
    from common import json_record

    json_record("peers", durability=label.split()[0], events=args.events,
                aggregates=args.aggregates, partitions=args.partitions, rounds=args.rounds,
                versions=versions(), results=results)


def run_bench(script: str, argv: Sequence[str]) -> dict[str, Any]:
    """Run ``bench/<script>`` with ``argv``, its output shown indented; returns its ``BENCH``
    record.

    Raises:
        SystemExit: the bench exited non-zero or printed no ``BENCH`` record.
    """
    import json

    path = Path(__file__).resolve().parent / script
    print(f"{script} {' '.join(argv)}", flush=True)
    proc = subprocess.Popen([sys.executable, str(path), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    record: dict[str, Any] | None = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("BENCH "):
            record = json.loads(line[len("BENCH "):])
        else:
            print("    " + line, end="", flush=True)
    if proc.wait() or record is None:
        raise SystemExit(f"bench/{script} exited {proc.returncode} (BENCH record: {record is not None})")
    return record


def floors(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The floors the figures of ``results`` (this run's) are held to: (floor, figure, met).

    Consumer: the batch handler >= 0.75 x B4 (median of the rounds' ratios) and at least the
    best peer with the same guarantees (hand-rolled loop, FastStream batch; medians of
    events/s). Keyed: each casestream handler kind >= 0.7 x C / wait and >= Pyrallel without
    a database at every C. Relay >= 0.9 x B5; commit -> topic p99 <= 20 ms; replay >= 0.6 x
    B2 for every projection. A group not in ``results`` gives no row."""
    rows: list[tuple[str, str, bool]] = []
    cons = results.get("consumer") or {}
    if cons.get("cs_batch") and cons.get("b4"):
        x = _median(cons["cs_batch"], "x_b4") or 0.0
        rows.append(("consumer, batch handler >= 0.75 x B4", f"{x:.2f} x B4", x >= 0.75))
        peers_ = {v: _median(cons[v], "events_per_s") for v in ("hand", "fs_batch") if cons.get(v)}
        if peers_:
            best = max(peers_, key=lambda v: peers_[v] or 0)
            own = _median(cons["cs_batch"], "events_per_s") or 0.0
            rows.append((f"consumer, batch handler >= the best peer ({best})",
                         f"{own:,.0f} vs {peers_[best]:,.0f} events/s", own >= (peers_[best] or 0)))
    keyed = results.get("keyed") or {}
    for v in ("cs_thread", "cs_coro"):
        if v not in keyed:
            continue
        for c, row in sorted(keyed[v].items(), key=lambda kv: int(kv[0])):
            rows.append((f"key-parallel {v}, C = {c}: >= 0.7 x ideal",
                         f"{row['x_ideal']:.2f} x ideal", row["x_ideal"] >= 0.7))
            pyr = (keyed.get("pyr") or {}).get(c)
            if pyr is not None:
                rows.append((f"key-parallel {v}, C = {c}: >= Pyrallel",
                             f"{row['events_per_s']:,} vs {pyr['events_per_s']:,} events/s",
                             row["events_per_s"] >= pyr["events_per_s"]))
    relay = results.get("relay") or {}
    if "relay_vs_b5" in relay:
        rows.append(("relay >= 0.9 x B5", f"{relay['relay_vs_b5']:.2f} x B5",
                     relay["relay_vs_b5"] >= 0.9))
    if "latency" in relay:
        p99 = relay["latency"]["p99_ms"]
        rows.append(("commit -> topic p99 <= 20 ms at 1,000 events/s", f"{p99} ms", p99 <= 20))
    for p, rec in (results.get("replay") or {}).items():
        rows.append((f"replay {p} >= 0.6 x B2", f"{rec['ratio_b2']:.2f} x B2", rec["ratio_b2"] >= 0.6))
    return rows


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("casestream", "faststream", "aiokafka", "pyrallel-consumer", "confluent-kafka",
                 "psycopg"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def measure(args: argparse.Namespace, label: str, results: dict[str, Any]) -> None:
    import psycopg

    from casestream.consumer.inbox import ensure_schema
    from casestream.service.gctune import freeze_startup_objects
    from casestream.testing.consumer import close_codec, create_topic, real_codec
    from common import check_durability, load_average, produce_all
    from consumer import events, projection_ddl

    check_durability(args.dsn, args.fast)
    codec = real_codec(args.registry_url, fallback=True)
    run = uuid.uuid4().hex[:8]
    topics: list[str] = []
    print(f"bench/peers: {label}; {versions()}")
    try:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            ensure_schema(conn)
        if "consumer" in args.groups:
            topic = f"bench.peers.{run}"
            topics.append(topic)
            evs = events(args.events, args.aggregates)
            create_topic(args.bootstrap, topic, args.partitions)
            produce_all(args.bootstrap, topic, codec, evs)
            frozen = freeze_startup_objects()
            print(f"consumer: {args.events:,} events, {args.aggregates:,} aggregates,"
                  f" {args.partitions} partitions, batch {args.batch_size}, {args.rounds} rounds,"
                  f" {frozen:,} objects frozen")
            results["consumer"] = consumer_rounds(args, codec, topic, evs, run, projection_ddl,
                                                  load_average)
        if "keyed" in args.groups:
            wait_s = args.wait_ms / 1000
            total = max(2_000, int(max(args.levels) / wait_s * args.keyed_seconds))
            topic = f"bench.peers.keyed.{run}"
            topics.append(topic)
            create_topic(args.bootstrap, topic, args.partitions)
            produce_all(args.bootstrap, topic, codec, events(total, args.keyed_aggregates))
            print(f"keyed: {total:,} events over {args.keyed_aggregates:,} aggregates, handler"
                  f" waits {args.wait_ms} ms, C = {args.levels}")
            results["keyed"] = keyed_rounds(args, codec, topic, run, load_average)
    finally:
        close_codec(codec)
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": args.bootstrap}).delete_topics(
            topics + [f"bench.peers-{run}-{k}-{r}-{i}.{s}" for k in ("cs_batch", "cs_event")
                      for r in range(args.rounds) for i in range(len(CONSUMER_VARIANTS) + 1)
                      for s in ("dlq", "redrive")]
            + [f"bench.peers-{run}-{k}-{c}.{s}" for k in ("cs_thread", "cs_coro")
               for c in args.levels for s in ("dlq", "redrive")])


def consumer_rounds(args: argparse.Namespace, codec: Any, topic: str, evs: Sequence[Any],
                    run: str, projection_ddl: Callable, load_average: Callable) -> dict[str, Any]:
    import psycopg

    n, batch = args.events, args.batch_size
    chosen = [v for v in CONSUMER_VARIANTS if v in args.variant_set]
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in chosen}
    others = [v for v in chosen if v != "b4"]
    for r in range(args.rounds):
        # every round in another order, so no variant always finds the emptiest database;
        # B4 opens and closes the round, and each ratio is to the mean of the two (the load
        # of the shared box moves within a round)
        order = others[r % len(others):] + others[:r % len(others)] if others else []
        if r % 2:
            order.reverse()
        if "b4" in chosen:
            order = ["b4", *order, "b4"]
        print(f"  round {r + 1}/{args.rounds} (load {load_average()}): {', '.join(order)}")
        b4_rates: list[float] = []
        for i, v in enumerate(order):
            table, cons = f"bench_peers_{v}_{run}_{r}_{i}", f"bench.peers-{run}-{v}-{r}-{i}"
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(projection_ddl(table))
            load = load_average()
            full, count = True, n
            if v == "b4":
                t = b4_run(args.dsn, evs, table, cons, batch)
            elif v == "b2":
                t = b2_run(args.bootstrap, topic, n, codec, batch)
            elif v in ("cs_batch", "cs_event"):
                t = casestream_run(args.bootstrap, args.dsn, topic, n, codec, table, cons, batch,
                                   handler="batch" if v == "cs_batch" else "cursor")
                if t.extra["fast_batches"] != t.extra["batches"]:
                    raise ResultError(f"{v}: {t.extra} (a batch left the fast path)")
            elif v == "hand":
                t = hand_rolled(args.bootstrap, args.dsn, topic, n, codec, table, cons, batch)
            else:
                full = v == "fs_batch"
                count = n if full else min(n, args.per_message_events)
                t = faststream_run(args.bootstrap, args.dsn, topic, count, codec, table, cons,
                                   batch, per_message=not full)
            if v != "b2":
                state = read_state(args.dsn, table, cons)
                # FastStream's per-message run stops after `count` events, so the inbox may
                # hold a few more (handled after the clock stopped)
                if not full:
                    state.inbox_rows = min(state.inbox_rows, count)
                    state.guard_rows = state.projection_rows
                check_consumer(state, events=count, aggregates=args.aggregates, full=full)
            rows[v].append({"events_per_s": round(t.rate), "cpu_us_per_event": round(t.cpu_us, 1),
                            "events": t.events, "load": load})
            if v == "b4":
                b4_rates.append(t.rate)
            print(f"    {v:9s} {t.rate:>9,.0f} events/s  cpu {t.cpu_us:>7,.1f} us/event"
                  f"  ({t.events:,} in {t.seconds:.2f} s; load {load}) checked", flush=True)
        if b4_rates:
            b4 = statistics.fmean(b4_rates)
            for v in chosen:
                for row in rows[v][-2:] if v == "b4" else rows[v][-1:]:
                    row["x_b4"] = round(row["events_per_s"] / b4, 3)
    print_consumer_table(rows)
    return rows


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def print_consumer_table(rows: dict[str, list[dict[str, Any]]]) -> None:
    print("\n| consumer: inbox + version guard + upsert per event | events/s (median) | x B4"
          " (median of rounds) | process CPU us/event (median) | load (1 min) |")
    print("| --- | --- | --- | --- | --- |")
    ordered = sorted(rows, key=lambda v: -(_median(rows[v], "events_per_s") or 0))
    for v in ordered:
        x = _median(rows[v], "x_b4")
        print(f"| {LABELS[v]} | {_median(rows[v], 'events_per_s'):,.0f} |"
              f" {'-' if x is None else f'{x:.2f}'} | {_median(rows[v], 'cpu_us_per_event'):,.0f} |"
              f" {_load_range(rows[v])} |")


def _load_range(rows: list[dict[str, Any]]) -> str:
    """The 1-minute load averages the rows were measured at, ``"9.4-12.2"``."""
    loads = [float(r["load"].split()[0]) for r in rows]
    return f"{min(loads):.1f}-{max(loads):.1f}" if len(loads) > 1 else f"{loads[0]:.1f}"


def keyed_rounds(args: argparse.Namespace, codec: Any, topic: str, run: str,
                 load_average: Callable) -> dict[str, Any]:
    from keyparallel import measured_sleep

    wait_s = args.wait_ms / 1000
    chosen = [v for v in KEYED_VARIANTS if v in args.variant_set]
    out: dict[str, dict[int, dict[str, Any]]] = {v: {} for v in chosen}
    for i, c in enumerate(args.levels):
        n = max(2_000, int(c / wait_s * args.keyed_seconds))
        sleep_s = measured_sleep(wait_s, 50)
        order = chosen if i % 2 == 0 else list(reversed(chosen))
        for v in order:
            cons = f"bench.peers-{run}-{v}-{c}"
            load = load_average()
            if v in ("cs_thread", "cs_coro"):
                t = casestream_keyed(args.bootstrap, args.dsn, topic, n, codec,
                                     f"bench_peers_kp_{v}_{run}_{c}", cons, concurrency=c,
                                     wait_s=wait_s, batch=args.batch_size,
                                     coroutine=v == "cs_coro")
            else:
                # Pyrallel's rate is several times lower: its run is capped (steady rate still)
                n_pyr = min(n, args.pyrallel_db_events if v == "pyr_db" else args.pyrallel_events)
                t, seen = pyrallel_run(args.bootstrap, args.dsn if v == "pyr_db" else None,
                                       topic, n_pyr, codec, cons, concurrency=c, wait_s=wait_s)
                check_order(seen, events=sum(len(x) for x in seen.values()))
                if sum(len(x) for x in seen.values()) < n_pyr:
                    raise ResultError(f"{v}: {sum(len(x) for x in seen.values())} handled,"
                                      f" want {n_pyr}")
                if v == "pyr_db":
                    check_pyrallel_db(args.dsn, cons, seen)
            ideal = c / wait_s
            out[v][c] = {"events_per_s": round(t.rate), "x_ideal": round(t.rate / ideal, 3),
                         "cpu_us_per_event": round(t.cpu_us, 1), "load": load,
                         "sleep_ms": round(sleep_s * 1000, 2)}
            print(f"    C={c:<3} {v:9s} {t.rate:>8,.0f} events/s = {t.rate / ideal:.2f} x ideal"
                  f" ({ideal:,.0f}); cpu {t.cpu_us:,.1f} us/event; load {load}; order checked",
                  flush=True)
    print(f"\n| keyed, {args.wait_ms:g} ms I/O handler, order per key checked |"
          + " | ".join(f"C = {c}" for c in args.levels) + " |")
    print("| --- |" + " --- |" * len(args.levels))
    for v in chosen:
        print(f"| {LABELS[v]} | " + " | ".join(
            f"{out[v][c]['events_per_s']:,} ({out[v][c]['x_ideal']:.2f})" for c in args.levels) + " |")
    print("| ideal C / wait | " + " | ".join(f"{c / wait_s:,.0f}" for c in args.levels) + " |")
    print("| load (1 min) | " + " | ".join(
        _load_range([out[v][c] for v in chosen]) for c in args.levels) + " |")
    return {v: {str(c): row for c, row in d.items()} for v, d in out.items()}


def debezium(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/debezium.py`` with ``--debezium-args``; its last line is its JSON summary.
    Not run (recorded so) when Kafka Connect does not answer."""
    import json
    import os
    import urllib.request

    url = os.environ.get("CASESTREAM_CONNECT_URL", "http://127.0.0.1:18083")
    try:
        urllib.request.urlopen(url, timeout=3).read()
    except OSError as exc:
        print(f"debezium: not run, Kafka Connect at {url} does not answer ({exc});"
              " start it with deploy/infra.sh up connect")
        return {"not_run": f"no Kafka Connect at {url}"}
    script = Path(__file__).resolve().parent / "debezium.py"
    print(f"debezium.py {args.debezium_args}", flush=True)
    proc = subprocess.Popen([sys.executable, str(script), *args.debezium_args.split()],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    last = ""
    for line in proc.stdout:
        if line.startswith("{"):
            last = line  # its summary, one JSON line
        else:
            print("    " + line, end="", flush=True)
    if proc.wait() or not last:
        raise SystemExit(f"bench/debezium.py exited {proc.returncode}")
    summary = json.loads(last)
    return {"medians": summary.get("medians"), "ratios": summary.get("ratios")}


if __name__ == "__main__":
    main()
