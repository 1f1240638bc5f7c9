"""bench/statements: what a handler's way of sending its statements costs the consumer.

A handler runs inside the consumer's batch transaction on ``ctx.conn`` (a psycopg 3
connection), in pipeline mode or not (``ConsumerSettings.pipeline_handlers``). The same
upserts (the consumer bench's projection row: 7 columns, ``ON CONFLICT DO UPDATE``), ``--batch``
per transaction (default 500, the consumer bench's batch), sent three ways:

* ``conn.execute``: one ``ctx.conn.execute(sql, row)`` per event (a new cursor per call);
* ``cursor.execute``: one cursor for the batch, ``cur.execute(sql, row)`` per event;
* ``executemany`` (the baseline): one ``cur.executemany(sql, rows)`` per batch, what a batch
  handler (``HandlerRegistry.on_batch``) sends.

Each way runs ``--rounds`` times in turn, in pipeline mode and without it; printed: client
(this process's) CPU µs per statement, wall µs per statement and statements/s, the medians
over the rounds, and each way's ratio to ``executemany`` of the same mode. With production
durability (``synchronous_commit=on``) unless ``--fast``; in a database of its own.
Usage: ``python bench/statements.py [--rows 20000] [--batch 500] [--rounds 3] [--fast]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402 - the bench folder is put on the path above
    check_durability, durability, infra_arguments, json_record, load_average, own_database,
)

UPSERT = ("INSERT INTO projection (case_id, tenant_id, title, severity, priority, version,"
          " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
          " ON CONFLICT (case_id) DO UPDATE SET title = EXCLUDED.title,"
          " severity = EXCLUDED.severity, priority = EXCLUDED.priority,"
          " version = EXCLUDED.version, updated_at = EXCLUDED.updated_at"
          " WHERE projection.version < EXCLUDED.version")
DDL = ("CREATE TABLE projection (case_id text PRIMARY KEY, tenant_id text, title text,"
       " severity text, priority int, version bigint, updated_at timestamptz)")
WAYS = ("conn.execute", "cursor.execute", "executemany")


def rows(n: int, round_no: int) -> list[tuple[Any, ...]]:
    """``n`` projection rows over ``n // 4`` cases; versions rise with ``round_no`` so every
    round updates."""
    at = datetime.now(timezone.utc)
    cases = max(1, n // 4)
    return [(f"case-{i % cases}", "t1", f"title {i}", "high", i % 5,
             round_no * n + i + 1, at) for i in range(n)]


def send(way: str, conn: Any, batch: list[tuple[Any, ...]]) -> None:
    """The statements of one batch, sent ``way``."""
    if way == "conn.execute":
        for r in batch:
            conn.execute(UPSERT, r)
    elif way == "cursor.execute":
        with conn.cursor() as cur:
            for r in batch:
                cur.execute(UPSERT, r)
    else:
        with conn.cursor() as cur:
            cur.executemany(UPSERT, batch)


def timed(conn: Any, way: str, data: list[tuple[Any, ...]], batch: int,
          pipeline: bool) -> tuple[float, float]:
    """(client CPU s, wall s) of writing ``data`` ``way``, ``batch`` rows per transaction."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(0, len(data), batch):
        chunk = data[i:i + batch]
        if pipeline:
            with conn.pipeline(), conn.transaction():
                send(way, conn, chunk)
        else:
            with conn.transaction():
                send(way, conn, chunk)
    return time.process_time() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000, help="statements per way and round")
    ap.add_argument("--batch", type=int, default=500, help="statements per transaction")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every way (medians)")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off beside the production figure (labelled)")
    infra_arguments(ap)
    args = ap.parse_args(argv)
    label = durability(args.fast)
    import psycopg

    print(f"statements: {args.rows} upserts per way and round, {args.batch} per transaction, "
          f"{args.rounds} rounds; {label}; load {load_average()}")
    results: dict[str, dict[str, float]] = {}
    with own_database(args.dsn, f"bench_statements_{uuid.uuid4().hex[:8]}") as dsn:
        check_durability(dsn, args.fast)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
            send("executemany", conn, rows(args.rows, 0))  # warm: rows exist, plans cached
            for pipeline in (True, False):
                mode = "pipeline" if pipeline else "no pipeline"
                runs: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
                for r in range(args.rounds):
                    for w_i, way in enumerate(WAYS):
                        data = rows(args.rows, 1 + r * len(WAYS) + w_i + (0 if pipeline else 100))
                        runs[way].append(timed(conn, way, data, args.batch, pipeline))
                base = statistics.median(w for _, w in runs["executemany"])
                for way in WAYS:
                    cpu = statistics.median(c for c, _ in runs[way]) / args.rows * 1e6
                    wall = statistics.median(w for _, w in runs[way])
                    per_s = args.rows / wall
                    results[f"{mode} {way}"] = {"cpu_us": round(cpu, 1),
                                                "wall_us": round(wall / args.rows * 1e6, 1),
                                                "per_s": round(per_s),
                                                "vs_executemany": round(base / wall, 2)}
                    print(f"  {mode:<12} {way:<15} client CPU {cpu:5.1f} µs, wall "
                          f"{wall / args.rows * 1e6:5.1f} µs per statement, {per_s:8,.0f}/s "
                          f"= {base / wall:.2f} × executemany")
    print(f"load after: {load_average()}")
    json_record("statements", durability=label, rows=args.rows, batch=args.batch,
                rounds=args.rounds, results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
