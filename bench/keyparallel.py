"""Key-parallel consumer benchmark: a handler that waits 5 ms per event (an external call).

On one 4-partition topic of CaseOpened events over many aggregates, a ``ConsumerRuntime`` runs
with ``ConsumerSettings(key_concurrency=C)`` for each C of ``--concurrency`` (default
8, 16, 32, 64), each in a fresh consumer group, until it has applied its share of events. The
handler sleeps ``--wait-ms`` (5): the external call; inbox and guard rows are written in the
unit's transaction as in production. ``--upsert`` adds one projection upsert per event (a
round trip on the unit's connection: on a loaded 2-core box it costs more than the wait).

Clock: the figure is the steady rate — events applied after the first 10% of the run divided
by the time from then to the last (``stats.applied``); the rate from the group's assignment
(start-up included) is printed beside it. Only events applied inside a clock are counted. Baselines of the
same run: the ideal ``C / wait`` with the *measured* mean of ``time.sleep(wait)`` on this box,
and the default runtime (``key_concurrency=1``) on the same handler. Target:
>= 0.7 x (C / 5 ms). After each run the projection is checked: one row per aggregate at its
last version (order per aggregate, no lost event): the guard rows (and with ``--upsert`` the
projection rows) of the run.

Every connection runs with ``synchronous_commit=on`` (libpq ``PGOPTIONS``) unless ``--fast``,
in a database of the bench's own on the server of ``--dsn`` (``common.own_database``, dropped
at the end). A run whose events all came in one unit is timed from the assignment.
The 2-core box is shared: the load average is printed with each figure.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/keyparallel.py [--concurrency 8,16,32,64] [--seconds 8]
        [--aggregates 20000] [--wait-ms 5] [--batch-size 500] [--fast]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
import time
import uuid
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.handlers.registry import HandlerContext, HandlerKind, HandlerRegistry
from casestream.consumer.inbox import ensure_schema
from casestream.events.envelope import Envelope
from casestream.testing.consumer import close_codec, create_topic, real_codec

from common import (
    check_durability,
    durability,
    infra_arguments,
    json_record,
    load_average,
    own_database,
    produce_all,
)
from consumer import UPSERT, _row, events, projection_ddl


def measured_sleep(wait_s: float, n: int = 200) -> float:
    """Mean seconds ``time.sleep(wait_s)`` takes on this box now."""
    t = time.perf_counter()
    for _ in range(n):
        time.sleep(wait_s)
    return (time.perf_counter() - t) / n


def run(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str, consumer: str,
        *, concurrency: int, wait_s: float, batch: int,
        upsert_row: bool, coroutine: bool) -> tuple[float, float, Any, float | None, float]:
    """Apply the first ``n`` events of ``topic``; returns (seconds from assignment, steady
    events/s, stats, share of the clock the workers were applying units (None:
    key_concurrency 1), process CPU / steady clock).

    Steady rate: events applied after the first 10% of ``n`` divided by the time from that
    moment to the end (start-up — the first fetch, the pool filling — is outside that clock)."""
    upsert = UPSERT.format(t=table)
    registry = HandlerRegistry()

    if coroutine:
        @registry.on("CaseOpened", kind=HandlerKind.PROJECTION)
        async def project_async(ctx: HandlerContext, e: Envelope) -> None:
            await asyncio.sleep(wait_s)  # the external call, on an async client
            if upsert_row:
                ctx.conn.execute(upsert, _row(e))
    else:
        @registry.on("CaseOpened", kind=HandlerKind.PROJECTION)
        def project(ctx: HandlerContext, e: Envelope) -> None:
            time.sleep(wait_s)  # the external call
            if upsert_row:
                ctx.conn.execute(upsert, _row(e))

    pool = ConnectionPool(dsn, min_size=2, max_size=concurrency + 1, open=True)
    rt = ConsumerRuntime(consumer, [topic], registry, codec, pool,
                         {"bootstrap.servers": bootstrap},
                         ConsumerSettings(batch_size=batch, poll_timeout_s=0.2,
                                          key_concurrency=concurrency))
    stop = threading.Event()
    th = threading.Thread(target=rt.run, args=(stop,), daemon=True)
    th.start()
    if not rt.ready.wait(60):
        raise SystemExit("no assignment in 60 s")
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    steady: tuple[float, int, float] | None = None  # (time, applied, cpu) at 10% of n
    while (applied := rt.stats.applied) < n:
        if not th.is_alive():
            raise SystemExit("runtime died")
        if steady is None and applied >= n // 10:
            steady = (time.perf_counter(), applied, time.process_time())
        time.sleep(0.005)
    t_end = time.perf_counter()
    secs = t_end - t0
    if steady is None:  # every event came in one unit (n <= the batch size): from the assignment
        steady = (t0, 0, cpu0)
    steady_rate = (rt.stats.applied - steady[1]) / (t_end - steady[0])
    cpu = time.process_time() - steady[2]
    w = rt._workers  # noqa: SLF001 - the bench reports worker utilisation
    busy = w.busy_s / (secs * len(w.processors)) if w is not None else None
    cpu_share = cpu / (t_end - steady[0])
    stop.set()
    th.join(60)
    pool.close()
    return secs, steady_rate, rt.stats, busy, cpu_share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="8,16,32,64",
                    help="comma-separated key_concurrency values to measure")
    ap.add_argument("--seconds", type=float, default=8.0,
                    help="events per run = ideal rate x this many seconds")
    ap.add_argument("--aggregates", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--wait-ms", type=float, default=5.0, help="the handler's wait per event")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--upsert", action="store_true",
                    help="the handler also upserts one projection row per event")
    ap.add_argument("--async", dest="coroutine", action="store_true",
                    help="the handler is a coroutine (async def, awaits asyncio.sleep)")
    ap.add_argument("--switch-interval-ms", type=float,
                    help="sys.setswitchinterval for this process (CPython default 5 ms)")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off (labelled: not production durability)")
    infra_arguments(ap)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    label = durability(args.fast)
    with own_database(args.dsn, f"bench_keyparallel_{uuid.uuid4().hex[:8]}") as dsn:
        args.dsn = dsn
        measure(args, label)


def measure(args: argparse.Namespace, label: str) -> None:
    """The runs of :func:`main`, in the database ``args.dsn`` (the bench's own)."""
    check_durability(args.dsn, args.fast)
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
        label += f", switch interval {args.switch_interval_ms} ms"
    levels = [int(x) for x in args.concurrency.split(",")]
    wait_s = args.wait_ms / 1000.0
    sizes = {c: max(2000, int(c / wait_s * args.seconds)) for c in [1, *levels]}
    sizes[1] = max(500, int(1 / wait_s * min(args.seconds, 5.0)))
    total = max(sizes.values())
    tag = uuid.uuid4().hex[:8]
    topic = f"bench.keyparallel.{tag}"
    codec = real_codec(args.registry_url, fallback=True)
    evs = events(total, args.aggregates)
    print(f"bench/keyparallel: {total:,} events over {args.aggregates:,} aggregates,"
          f" {args.partitions} partitions, handler waits {args.wait_ms} ms"
          f"{' + 1 upsert' if args.upsert else ''}, {label}")
    create_topic(args.bootstrap, topic, args.partitions)
    produce_all(args.bootstrap, topic, codec, evs)
    tables = {c: f"bench_kp_{tag}_{c}" for c in sizes}
    consumers = {c: f"bench.kp-{tag}-{c}" for c in sizes}
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        ensure_schema(conn)
        for t in tables.values():
            conn.execute(projection_ddl(t))
    results: dict[int, dict[str, Any]] = {}
    try:
        for c in [1, *levels]:
            sleep_s = measured_sleep(wait_s)
            n = sizes[c]
            secs, steady, stats, busy, cpu_share = run(args.bootstrap, args.dsn, topic, n, codec, tables[c], consumers[c],
                              concurrency=c, wait_s=wait_s, batch=args.batch_size,
                              upsert_row=args.upsert, coroutine=args.coroutine)
            with psycopg.connect(args.dsn) as conn:
                last = dict(conn.execute(
                    "SELECT aggregate_id, max(aggregate_version) FROM consumer_inbox"
                    " WHERE consumer = %s GROUP BY aggregate_id", (consumers[c],)).fetchall())
                got = dict(conn.execute(
                    f"SELECT case_id, version FROM {tables[c]}" if args.upsert else
                    "SELECT aggregate_id, last_version FROM consumer_version_guard"
                    " WHERE consumer = %s", () if args.upsert else (consumers[c],)).fetchall())
            wrong = sum(1 for agg, v in last.items() if got.get(agg) != v)
            rate = steady
            ideal, ideal_measured = c / wait_s, c / sleep_s
            results[c] = {"events": n, "seconds": round(secs, 2), "events_per_s": round(rate),
                          "events_per_s_from_assignment": round(n / secs),
                          "ideal_per_s": round(ideal), "ideal_measured_sleep_per_s":
                          round(ideal_measured), "ratio": round(rate / ideal, 3),
                          "units": stats.batches, "fast_units": stats.fast_batches,
                          "aggregates_off_last_version": wrong,
                          "process_cpu_share": round(cpu_share, 2)}
            target = "" if c == 1 else (
                f" -> >= 0.7 x {'OK' if rate >= 0.7 * ideal else 'MISSED'}")
            print(f"  key_concurrency {c:>3}: {rate:>8,.0f} events/s = {rate / ideal:.2f} x"
                  f" ({c} / {args.wait_ms} ms = {ideal:,.0f}/s); x measured sleep"
                  f" ({sleep_s * 1000:.2f} ms) {rate / ideal_measured:.2f}; from assignment {n / secs:,.0f}"
                  f" events/s ({n:,} in {secs:.1f} s), {stats.batches:,} units ({stats.fast_batches:,} fast);"
                  f" aggregates not at last version {wrong}; workers busy"
                  f" {'-' if busy is None else f'{busy:.0%}'}, process CPU"
                  f" {cpu_share:.0%} of a core; load average {load_average()}{target}")
            if wrong:
                raise SystemExit(f"order broken: {wrong} projection rows not at the last version")
        json_record("keyparallel", durability=label.split()[0], wait_ms=args.wait_ms,
                    upsert=args.upsert,
                    partitions=args.partitions, results=results)
    finally:
        close_codec(codec)  # the database goes with own_database
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": args.bootstrap}).delete_topics(
            [topic] + [f"{cons}.{sfx}" for cons in consumers.values() for sfx in ("dlq", "redrive")])


if __name__ == "__main__":
    main()
