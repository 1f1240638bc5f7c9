"""bench/xmin: the relay at a steady rate while a snapshot elsewhere holds the vacuum horizon.

On the real PostgreSQL and Kafka of ``deploy/infra.sh``, for each variant in turn (default
``from-start`` = claims scan ``outbox_pending_idx`` from its start, the design before the claim
floor, then ``floor`` = ``RelaySettings.claim_floor``; ``--rounds`` alternates them again):

* a writer process commits ``--rate`` events/s (default 500), one autocommit INSERT each;
* an ``OutboxRelay`` thread publishes them to a topic of its own (retention
  ``--retention-s``, default 120: the relay's per-row retention deletes run during the hold);
* after ``--pre-s`` seconds another session of the same database runs ``BEGIN ISOLATION LEVEL
  REPEATABLE READ; SELECT 1`` and stays idle for ``--hold-min`` minutes (default 10), then
  rolls back; the run goes on for ``--post-s`` seconds. (A snapshot without a transaction id
  holds the horizon of its own database only, PostgreSQL 14+; one in another database would
  not slow this outbox.)

Every ``--window-s`` (30) seconds it samples the outbox's ``n_dead_tup``, the relay's
``postgres_xmin_horizon_age_seconds``, and ``EXPLAIN (ANALYZE, BUFFERS)`` of the variant's
claim statement and of the retention delete's row selection (shared buffers hit + read, ms).
Per window it also records commit -> record timestamp p50/p99/max (``published_at``, the
record's CreateTime, minus ``created_at``, the inserting transaction's start; the INSERT is
its only statement) of the rows committed in it (read one window later, before retention
deletes them; ``unpub`` = still pending then), and rows the relay published per second.
``synchronous_commit=on`` on every connection (:func:`common.durability`). The held minutes are
printed. Usage: ``python bench/xmin.py [--rate 500] [--hold-min 10] [--pre-s 30] [--post-s 60]
[--window-s 30] [--variants from-start,floor] [--rounds 1] [--retention-s 60]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import threading
import time
import uuid
from typing import Any

import psycopg

from casestream.kafka.config import producer_config
from casestream.outbox.relay import OutboxRelay, RelaySettings, store
from casestream.testing.relay import FakeEnvelope, JsonCodec, create_topics, delete_topics, isolated_schema

from common import check_durability, durability, json_record, load_average

PG = os.environ.get("CASESTREAM_BENCH_PG") or (
    os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432").rstrip("/")
    + "/casestream_test")
KAFKA = os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")

_INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version,
                    event_version, correlation_id, occurred_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_RETENTION_SELECT = """
SELECT o.id FROM outbox o
WHERE o.status = 'published' AND o.published_at < now() - %(keep)s * interval '1 second'
  AND o.shard IN (SELECT l.shard FROM outbox_relay_lease l WHERE l.locked_until > now())
ORDER BY o.published_at LIMIT 10000
"""


def _writer(dsn: str, rate: float, stop: Any, out: Any) -> None:
    """Child process: commit ``rate`` events/s (one autocommit INSERT each) until ``stop``;
    send the number written."""
    codec = JsonCodec()
    versions: dict[str, int] = {}
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        while not stop.is_set():
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            agg = f"x-{n % 1000}"
            versions[agg] = versions.get(agg, 0) + 1
            e = FakeEnvelope(aggregate_type="case", aggregate_id=agg,
                             aggregate_version=versions[agg], payload_size=300)
            conn.execute(_INSERT, (e.event_id, e.aggregate_type, e.aggregate_id, e.event_type,
                                   codec.encode(e), e.aggregate_version, e.event_version,
                                   e.correlation_id, e.occurred_at))
            n += 1
    out.put(n)


def _explain(conn: psycopg.Connection, sql: str, params: dict) -> tuple[int, float]:
    """(shared buffers hit + read, execution ms) of ``EXPLAIN (ANALYZE, BUFFERS) sql``."""
    lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()]
    bufs = 0
    for line in lines:
        if "Buffers:" in line:
            bufs = sum(int(x) for x in re.findall(r"(?:hit|read)=(\d+)", line.split("Buffers:")[1]))
            break  # the top node's line holds the whole statement's
    ms = next((float(m.group(1)) for line in lines
               if (m := re.search(r"Execution Time: ([\d.]+) ms", line))), 0.0)
    return bufs, ms


def _latency(row: Any) -> dict:
    """Window figures from (count, p50 s, p99 s, max s, unpublished count)."""
    ms = (lambda x: round(x * 1000, 1) if x is not None else None)
    return {"committed": int(row[0]), "p50_ms": ms(row[1]), "p99_ms": ms(row[2]), "max_ms": ms(row[3]),
            "unpublished": int(row[4])}


def run(variant: str, *, rate: float, hold_s: float, pre_s: float, post_s: float, window_s: float,
        retention_s: float) -> dict:
    floor = variant == "floor"
    ctx = multiprocessing.get_context("spawn")
    prefix = f"bx{uuid.uuid4().hex[:8]}.outbox.event."
    create_topics(KAFKA, [prefix + "case"], partitions=6)
    with isolated_schema(PG, prefix=f"bench_xmin_{variant.replace('-', '_')}") as dsn:
        gauges: list[float] = []
        relay = OutboxRelay(dsn, producer_config(KAFKA, client_id=f"bench-xmin-{variant}"),
                            RelaySettings(topic_prefix=prefix, claim_floor=floor, metrics_interval_s=5.0,
                                          published_retention_s=retention_s, cleanup_interval_s=5.0),
                            f"bench-xmin-{variant}",
                            on_metrics=lambda m: gauges.append(m["postgres_xmin_horizon_age_seconds"]))
        stop = threading.Event()
        rt = threading.Thread(target=relay.run, args=(stop,), daemon=True)
        rt.start()
        wstop, wout = ctx.Event(), ctx.Queue()
        wp = ctx.Process(target=_writer, args=(dsn, rate, wstop, wout))
        wp.start()
        holder: psycopg.Connection | None = None
        held_at = released_at = 0.0
        samples: list[dict] = []
        claim_sql = store._CLAIM if floor else store._CLAIM_FROM_START
        params = {"shards": list(range(32)), "limit": 1000, "inflight": [], "busy": []}
        t0 = time.time()
        total = pre_s + hold_s + post_s
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET enable_bitmapscan = off")  # as the relay's connection
            k = 0
            published_before = 0
            while True:
                k += 1
                target = t0 + k * window_s
                while time.time() < target:
                    elapsed = time.time() - t0
                    if holder is None and pre_s <= elapsed < pre_s + hold_s:
                        holder = psycopg.connect(dsn)
                        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                        holder.execute("SELECT 1")  # the snapshot: xmin held from here
                        held_at = time.time()
                    if holder is not None and not holder.closed and elapsed >= pre_s + hold_s:
                        holder.rollback()
                        holder.close()
                        released_at = time.time()
                    time.sleep(min(0.2, max(0.0, target - time.time())))
                lat = conn.execute(
                    """SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY d),
                              percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d),
                              count(*) FILTER (WHERE d IS NULL)
                       FROM (SELECT extract(epoch FROM published_at - created_at) AS d FROM outbox
                             WHERE created_at >= to_timestamp(%(a)s) AND created_at < to_timestamp(%(b)s)) AS x""",
                    {"a": target - 2 * window_s, "b": target - window_s}).fetchone()
                published_now = relay.metrics.published_total
                dead = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables "
                                    "WHERE relname = 'outbox' AND schemaname = current_schema()").fetchone()[0]
                cb, cms = _explain(conn, claim_sql, params)
                rb, rms = _explain(conn, _RETENTION_SELECT, {"keep": retention_s})
                phase = ("before" if holder is None else "held" if not holder.closed else "after")
                if k >= 2:  # the window before the last: its rows are published (or late)
                    samples[-1].update(_latency(lat))
                samples.append({"t": round(target - t0), "phase": phase, "n_dead_tup": int(dead),
                                "published_per_s": round((published_now - published_before) / window_s, 1),
                                "claim_buffers": cb, "claim_ms": round(cms, 2),
                                "retention_buffers": rb, "retention_ms": round(rms, 2),
                                "xmin_age_s": round(gauges[-1], 1) if gauges else 0.0})
                published_before = published_now
                if target - t0 >= total:
                    break
            wstop.set()
            written = wout.get(timeout=60)
            wp.join()
            deadline = time.time() + 60
            while time.time() < deadline and conn.execute(
                    "SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0]:
                time.sleep(0.5)
            stop.set()
            rt.join(30)
            # the last window's rows, once the relay drained the outbox
            samples[-1].update(_latency(conn.execute(
                """SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY d),
                          percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d),
                          count(*) FILTER (WHERE d IS NULL)
                   FROM (SELECT extract(epoch FROM published_at - created_at) AS d FROM outbox
                         WHERE created_at >= to_timestamp(%(a)s)) AS x""",
                {"a": t0 + len(samples) * window_s - window_s}).fetchone()))
    delete_topics(KAFKA, [prefix + "case"])
    held = (released_at or time.time()) - held_at if held_at else 0.0
    return {"variant": variant, "written": written, "held_s": round(held, 1), "windows": samples}


def _print(res: dict, window_s: float) -> None:
    print(f"  variant {res['variant']}: {res['written']:,} events written, xmin held {res['held_s'] / 60:.1f} min")
    print(f"  {'t(s)':>5} {'phase':6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'pub/s':>6} "
          f"{'unpub':>5} {'n_dead':>7} {'claim buf':>9} {'claim ms':>8} {'ret buf':>8} {'ret ms':>7} {'xmin age':>8}")
    for s in res["windows"]:
        print(f"  {s['t']:>5} {s['phase']:6} {s.get('p50_ms') or 0:>8} {s.get('p99_ms') or 0:>8} {s.get('max_ms') or 0:>8} "
              f"{s['published_per_s']:>6} {s.get('unpublished', 0):>5} {s['n_dead_tup']:>7} {s['claim_buffers']:>9} {s['claim_ms']:>8} "
              f"{s['retention_buffers']:>8} {s['retention_ms']:>7} {s['xmin_age_s']:>8}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="events/s committed")
    ap.add_argument("--hold-min", type=float, default=10.0, help="minutes the snapshot is held")
    ap.add_argument("--pre-s", type=float, default=30.0)
    ap.add_argument("--post-s", type=float, default=60.0)
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--variants", default="from-start,floor")
    ap.add_argument("--rounds", type=int, default=1, help="times the variants run, alternating")
    ap.add_argument("--retention-s", type=float, default=120.0, help="relay published_retention_s")
    a = ap.parse_args()
    label = durability(False)
    check_durability(PG, False)
    variants = [v.strip() for v in a.variants.split(",")]
    for v in variants:
        if v not in ("from-start", "floor"):
            raise SystemExit(f"--variants: unknown variant {v!r} (from-start, floor)")
    print(f"bench/xmin: {label}; {a.rate:g} events/s, xmin held {a.hold_min:g} min after {a.pre_s:g} s, "
          f"then {a.post_s:g} s; windows of {a.window_s:g} s; load average {load_average()}", flush=True)
    results = []
    for r in range(a.rounds):
        for v in variants:
            res = run(v, rate=a.rate, hold_s=a.hold_min * 60, pre_s=a.pre_s, post_s=a.post_s,
                      window_s=a.window_s, retention_s=a.retention_s)
            _print(res, a.window_s)
            print(f"  load average {load_average()}", flush=True)
            results.append(res)
    summary = {}
    for res in results:
        held = [s for s in res["windows"] if s["phase"] == "held"]
        after = [s for s in res["windows"] if s["phase"] == "after"]
        key = res["variant"].replace("-", "_")
        summary.setdefault(key, []).append({
            "held_min": round(res["held_s"] / 60, 2),
            "held_p99_ms_max": max((s.get("p99_ms") or 0 for s in held), default=None),
            "held_claim_buffers_last": held[-1]["claim_buffers"] if held else None,
            "held_claim_ms_last": held[-1]["claim_ms"] if held else None,
            "held_retention_buffers_last": held[-1]["retention_buffers"] if held else None,
            "n_dead_tup_max": max(s["n_dead_tup"] for s in res["windows"]),
            "after_published_per_s": [s["published_per_s"] for s in after]})
    json_record("xmin", rate=a.rate, hold_min=a.hold_min, results=summary)


if __name__ == "__main__":
    main()
