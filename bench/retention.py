"""bench/retention: table sizes after N events (default 1,000,000) with and without retention.

On the real PostgreSQL of ``deploy/infra.sh`` (``synchronous_commit=on`` in the bench's
sessions), in two isolated schemas, the same event stream is written the way the suite
writes it, in batches of 1,000 events:

* producer side (mark-published mode): the outbox rows are inserted (``OutboxWriter`` SQL,
  ~300-byte payloads, A aggregates, default 100,000) and then marked published with the
  relay's own statement (``store.mark_outcomes``);
* consumer side: one ``consumer_inbox`` row per event and the version-guard upsert of its
  aggregate (the inbox DDL of ``casestream.consumer.inbox``).

**without**: the outbox with PostgreSQL's default autovacuum settings and published rows
kept (``published_retention_s`` 3600 s, longer than the run), no inbox purge;
**with**: ``OUTBOX_STORAGE_MIGRATION`` (autovacuum), the relay's retention delete
(``store.delete_published``) and the inbox purge (``consumer.retention.purge_inbox``) run
every 10,000 events, each keeping the last ``--window`` events' worth of rows (default
20,000 — a steady state of 20 s at 1,000 events/s; in production the window is the
retention time, and the cutoff comes from the broker, see ``casestream.consumer.retention``).
Guard rows are one per aggregate in both runs (STRICT consumers keep them; see the module).

The stream is synthetic (SQL, no Kafka): it measures what the tables hold, not throughput.
Prints ``pg_total_relation_size`` of each table every 100,000 events and at the end, and a
final JSON line. Usage: ``python bench/retention.py [--events 1000000] [--aggregates 100000]
[--window 20000] [--dsn URL]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg

from casestream.consumer.inbox import INBOX_DDL
from casestream.consumer.retention import purge_inbox
from casestream.migrations import apply_migrations
from casestream.outbox.relay import store
from casestream.outbox.writer import OUTBOX_MIGRATION, OUTBOX_STORAGE_MIGRATION
from casestream.testing.relay import isolated_schema

BATCH = 1000
CLEAN_EVERY = 10_000
TABLES = ("outbox", "consumer_inbox", "consumer_version_guard")

_INSERT_OUTBOX = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version,
                    event_version, tenant_id, correlation_id, traceparent, occurred_at, created_at)
SELECT gen_random_uuid(), 'case', 'agg-' || mod(%(first)s + g, %(aggs)s), 'CaseUpdated',
       convert_to(repeat('x', %(payload)s), 'UTF8'), 1 + (%(first)s + g) / %(aggs)s, 1, 't1',
       'corr', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', %(at)s, %(at)s
FROM generate_series(0, %(n)s - 1) AS g
RETURNING id::text
"""
_INSERT_INBOX = """
INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type, aggregate_id,
                            aggregate_version, processed_at)
SELECT 'bench.consumer', id, 'CaseUpdated', 'case', 'agg-' || mod(%(first)s + g, %(aggs)s),
       1 + (%(first)s + g) / %(aggs)s, %(at)s
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS u(id, g)
"""
_UPSERT_GUARD = """
INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id, last_version)
SELECT 'bench.consumer', 'case', 'agg-' || mod(%(first)s + g, %(aggs)s), 1 + (%(first)s + g) / %(aggs)s
FROM generate_series(0, %(n)s - 1) AS g
ON CONFLICT (consumer, aggregate_type, aggregate_id)
DO UPDATE SET last_version = EXCLUDED.last_version, updated_at = now()
  WHERE consumer_version_guard.last_version < EXCLUDED.last_version
"""


def _sizes(conn: psycopg.Connection) -> dict[str, int]:
    return {t: conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0] for t in TABLES}


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def run(dsn: str, *, events: int, aggregates: int, window: int, retention: bool, payload: int) -> dict:
    label = "with" if retention else "without"
    with isolated_schema(dsn, prefix=f"bench_ret_{label}", migrate=False) as scoped:
        apply_migrations(scoped, [OUTBOX_MIGRATION, OUTBOX_STORAGE_MIGRATION] if retention else [OUTBOX_MIGRATION])
        with psycopg.connect(scoped, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(INBOX_DDL)
            owner = f"bench/{uuid.uuid4().hex[:8]}"
            conn.execute("UPDATE outbox_relay_lease SET locked_by = %s, locked_until = 'infinity'", (owner,))
            # Virtual clock: event i happened at t0 + i ms (1,000 events/s), so that "keep the
            # last W events" is a time window as in production.
            t0 = datetime.now(timezone.utc) - timedelta(milliseconds=events)
            trace = []
            started = time.perf_counter()
            for first in range(0, events, BATCH):
                n = min(BATCH, events - first)
                at = t0 + timedelta(milliseconds=first)
                with conn.transaction():
                    ids = [r[0] for r in conn.execute(_INSERT_OUTBOX, {
                        "first": first, "aggs": aggregates, "payload": payload, "n": n, "at": at}).fetchall()]
                ts_ms = int(at.timestamp() * 1000)
                store.mark_outcomes(conn, delivered=[store.Delivered(i, ts_ms, 0, first + k)
                                                     for k, i in enumerate(ids)],
                                    retry=[], failed=[], delete_published=False)
                with conn.transaction():
                    conn.execute(_INSERT_INBOX, {"first": first, "aggs": aggregates, "ids": ids, "at": at})
                    conn.execute(_UPSERT_GUARD, {"first": first, "aggs": aggregates, "n": n})
                done = first + n
                if retention and done % CLEAN_EVERY == 0:
                    now = t0 + timedelta(milliseconds=done)
                    keep_s = window / 1000.0
                    # delete_published compares with now(); shift by the virtual clock's lag
                    lag_s = (datetime.now(timezone.utc) - now).total_seconds()
                    store.delete_published(conn, owner, keep_s + lag_s, 1_000_000)
                    purge_inbox(conn, "bench.consumer", now - timedelta(seconds=keep_s))
                if done % 100_000 == 0 or done == events:
                    sizes = _sizes(conn)
                    trace.append({"events": done, **sizes})
                    print(f"  {label:7s} {done:>9,} events: " + ", ".join(
                        f"{t} {_mb(v)}" for t, v in sizes.items()), flush=True)
            elapsed = time.perf_counter() - started
            rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
            dead = dict(conn.execute(
                "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                (list(TABLES),)).fetchall())
            return {"label": label, "seconds": round(elapsed, 1), "final": trace[-1], "rows": rows,
                    "dead_tuples": dead, "trace": trace}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/retention.py", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--aggregates", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=20_000, help="events kept by the retention run")
    ap.add_argument("--payload", type=int, default=300, help="outbox payload bytes")
    ap.add_argument("--dsn", default=None, help="database URL (default: CASESTREAM_PG_URL/casestream_test)")
    a = ap.parse_args(argv)
    dsn = a.dsn or os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432").rstrip("/") \
        + "/casestream_test"
    print(f"retention bench: {a.events:,} events over {a.aggregates:,} aggregates, window {a.window:,}")
    results = [run(dsn, events=a.events, aggregates=a.aggregates, window=a.window, retention=r,
                   payload=a.payload) for r in (False, True)]
    print("final sizes:")
    for r in results:
        print(f"  {r['label']:7s} " + ", ".join(f"{t} {_mb(r['final'][t])} ({r['rows'][t]:,} rows, "
                                               f"{r['dead_tuples'].get(t, 0):,} dead)" for t in TABLES)
              + f"  [{r['seconds']} s]")
    print(json.dumps({"events": a.events, "aggregates": a.aggregates, "window": a.window,
                      "results": [{k: v for k, v in r.items() if k != "trace"} for r in results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
