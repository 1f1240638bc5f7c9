"""Consumer runtime benchmark: inbox + version guard + one projection upsert per event.

In one run, on the same 100,000 events already on a topic:

- **runtime** — ``ConsumerRuntime`` (real Kafka, real PostgreSQL, real ``EnvelopeCodec``):
  decode, upcast, inbox row, guard row and one projection upsert per event, one transaction
  per poll batch, offsets committed after each batch.
- **B2** — raw consume + ``fastavro.schemaless_reader`` decode loop (no database).
- **B4** — the same SQL without Kafka, batched: per 500 events one transaction with the inbox
  rows and guard rows (``unnest``) and the projection upserts (``executemany``);
  **B4-copy** (``--copy``) does the inbox and projection via ``COPY`` (reported, not a target).

The runtime is measured three times: with the projection as a batch handler (``on_batch``,
``executemany`` over each run of events), the same as a ``ConsumerGroup`` of ``--members``
(default 2) runtimes in this process (partition-parallel: own consumer, database thread and
connection each), and as a per-event handler, once with ``ctx.conn.execute`` (a cursor per
statement) and once with ``ctx.cursor.execute`` (the cursor the handlers share).
Objects alive before the measurements (the envelopes too) are frozen, as a service freezes
its start-up objects (``casestream.service.gctune``). Rounds are interleaved (``--rounds``, default 3) because the 2-core box is shared; printed:
events/s per round and best-of, the ratio to B2 (best) and to B4 per round. Target:
runtime >= 8,000 events/s and >= 0.5 x B4. The group consumes a topic of its own, empty until
its last member has its assignment; then the clock starts and the events (encoded beforehand)
are put on it, so every event is applied inside the clock.

Every connection (the bench's and the runtime's) runs with ``synchronous_commit=on`` (libpq
``PGOPTIONS``) unless ``--fast`` (labelled), in a database of the bench's own on the server of
``--dsn`` (``common.own_database``; dropped at the end unless ``--keep``), so rows that earlier
runs left in a shared inbox do not slow its inserts. A final ``BENCH {...}`` line is the JSON record.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/consumer.py [--events 100000] [--aggregates 10000] [--partitions 4]
        [--batch-size 500] [--rounds 3] [--members 2] [--copy] [--no-tracing] [--fast]
        [--dsn postgresql://postgres@127.0.0.1:15432/casestream_test]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from confluent_kafka import Consumer
from fastavro import parse_schema, schemaless_reader
from psycopg_pool import ConnectionPool

from casestream.consumer import ConsumerGroup, ConsumerRuntime, ConsumerSettings
from casestream.testing.consumer import close_codec, create_topic, headers_of, real_codec
from casestream.events.envelope import Envelope
from casestream.service.gctune import freeze_startup_objects
from casestream.handlers.registry import HandlerContext, HandlerKind, HandlerRegistry
from casestream.consumer.inbox import ensure_schema

from common import (
    check_durability,
    durability,
    infra_arguments,
    json_record,
    load_average,
    own_database,
    produce_all,
    produce_encoded,
)

PAYLOAD = {"title": "Unlicensed waste disposal near the river",
           "summary": "Reporter saw barrels dumped behind the depot on two nights; photos attached.",
           "severity": 4, "evidence_count": 3, "reporter_email": "reporter@example.org",
           "priority": "HIGH"}

UPSERT = ("INSERT INTO {t} (case_id, tenant_id, title, severity, priority, version, updated_at)"
          " VALUES (%s, %s, %s, %s, %s, %s, %s)"
          " ON CONFLICT (case_id) DO UPDATE SET title = EXCLUDED.title,"
          " severity = EXCLUDED.severity, priority = EXCLUDED.priority,"
          " version = EXCLUDED.version, updated_at = EXCLUDED.updated_at")


def events(n: int, aggregates: int) -> list[Envelope]:
    """``n`` CaseOpened v3 events over ``aggregates`` aggregates, versions 1.. in order."""
    ids = [str(uuid.uuid4()) for _ in range(aggregates)]
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        agg = ids[i % aggregates]
        out.append(Envelope(
            event_id=str(uuid.uuid4()), event_type="CaseOpened", event_version=None, source="case",
            tenant_id="tenant-1", aggregate_type="case", aggregate_id=agg,
            aggregate_version=i // aggregates + 1, occurred_at=now, correlation_id=agg,
            actor_id="officer-17", payload=PAYLOAD,
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
    return out


def b2_consume_decode(bootstrap: str, topic: str, n: int, codec: Any, batch: int) -> float:
    """Raw consume + fastavro decode; returns seconds from first message to the n-th."""
    writer = None
    for sv in codec.catalog.iter_versions():
        if sv.event_type == "CaseOpened" and sv.version == max(
                v.version for v in codec.catalog.iter_versions() if v.event_type == "CaseOpened"):
            writer = parse_schema(sv.schema)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench.b2-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen, t0 = 0, None
    try:
        while seen < n:
            for m in c.consume(batch, 1.0):
                if m.error():
                    continue
                if t0 is None:
                    t0 = time.perf_counter()
                bio = io.BytesIO(m.value())
                bio.seek(5)
                schemaless_reader(bio, writer, None)
                seen += 1
        return time.perf_counter() - t0  # type: ignore[operator]
    finally:
        c.close()


def projection_ddl(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} (case_id text PRIMARY KEY, tenant_id text NOT NULL,"
            " title text, severity int, priority text, version bigint NOT NULL,"
            " updated_at timestamptz)")


def b4_sql(dsn: str, evs: list[Envelope], table: str, consumer: str, batch: int) -> float:
    """The runtime's SQL without Kafka: inbox + guard (unnest) + projection (executemany)."""
    upsert = UPSERT.format(t=table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        for i in range(0, len(evs), batch):
            chunk = evs[i:i + batch]
            with conn.transaction():
                conn.execute(
                    "INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type,"
                    " aggregate_id, aggregate_version) SELECT %s, * FROM unnest(%s::text[],"
                    " %s::text[], %s::text[], %s::text[], %s::bigint[])",
                    (consumer, [e.event_id for e in chunk], [e.event_type for e in chunk],
                     [e.aggregate_type for e in chunk], [e.aggregate_id for e in chunk],
                     [e.aggregate_version for e in chunk]))
                last: dict[str, int] = {}
                for e in chunk:
                    last[e.aggregate_id] = e.aggregate_version
                conn.execute(
                    "INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id,"
                    " last_version) SELECT %s, 'case', * FROM unnest(%s::text[], %s::bigint[])"
                    " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
                    " SET last_version = EXCLUDED.last_version, updated_at = now()",
                    (consumer, list(last), list(last.values())))
                with conn.cursor() as cur:
                    cur.executemany(upsert, [
                        (e.aggregate_id, e.tenant_id, e.payload["title"], e.payload["severity"],
                         e.payload["priority"], e.aggregate_version, e.occurred_at) for e in chunk])
        return time.perf_counter() - t


def b4_copy(dsn: str, evs: list[Envelope], table: str, consumer: str, batch: int) -> float:
    """Inbox via COPY; projection via COPY into a temp table + INSERT ... SELECT ON CONFLICT."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TEMP TABLE stage (LIKE {table})")
        t = time.perf_counter()
        for i in range(0, len(evs), batch):
            chunk = evs[i:i + batch]
            with conn.transaction():
                with conn.cursor().copy(
                        "COPY consumer_inbox (consumer, event_id, event_type, aggregate_type,"
                        " aggregate_id, aggregate_version) FROM STDIN") as cp:
                    for e in chunk:
                        cp.write_row((consumer, e.event_id, e.event_type, e.aggregate_type,
                                      e.aggregate_id, e.aggregate_version))
                last: dict[str, Envelope] = {}
                for e in chunk:
                    last[e.aggregate_id] = e
                conn.execute(
                    "INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id,"
                    " last_version) SELECT %s, 'case', * FROM unnest(%s::text[], %s::bigint[])"
                    " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
                    " SET last_version = EXCLUDED.last_version, updated_at = now()",
                    (consumer, list(last), [e.aggregate_version for e in last.values()]))
                conn.execute("TRUNCATE stage")
                with conn.cursor().copy("COPY stage FROM STDIN") as cp:
                    for e in last.values():
                        cp.write_row((e.aggregate_id, e.tenant_id, e.payload["title"],
                                      e.payload["severity"], e.payload["priority"],
                                      e.aggregate_version, e.occurred_at))
                conn.execute(
                    f"INSERT INTO {table} SELECT * FROM stage ON CONFLICT (case_id) DO UPDATE"
                    " SET title = EXCLUDED.title, severity = EXCLUDED.severity,"
                    " priority = EXCLUDED.priority, version = EXCLUDED.version,"
                    " updated_at = EXCLUDED.updated_at")
        return time.perf_counter() - t


def _row(e: Envelope) -> tuple[Any, ...]:
    p = e.payload
    return (e.aggregate_id, e.tenant_id, p["title"], p["severity"], p["priority"],
            e.aggregate_version, e.occurred_at)


def runtime_run(bootstrap: str, dsn: str, topic: str, n: int, codec: Any, table: str,
                consumer: str, batch: int, *, handler: str, members: int = 1,
                encoded: Sequence[tuple[bytes, bytes, Any]] = (),
                partitions: int = 4) -> tuple[float, int, Any]:
    """Run ConsumerRuntime (``members`` > 1: a ConsumerGroup of that many runtimes in this
    process) until n events applied; returns (seconds after assignment, events applied in
    those seconds, stats).

    The clock starts when every member has its assignment. A group consumes a topic of its
    own with ``partitions`` partitions, empty until then: ``encoded`` (key, value, headers)
    is put on it once the clock has started, so every event is applied inside it.

    The projection is one upsert per event: ``handler`` ``"execute"`` (``ctx.conn.execute`` per
    event), ``"cursor"`` (``ctx.cursor.execute`` per event), or ``"batch"`` (``executemany``
    over the run of events, ``on_batch``).
    """
    upsert = UPSERT.format(t=table)
    registry = HandlerRegistry()
    if handler == "batch":
        @registry.on_batch("CaseOpened", kind=HandlerKind.PROJECTION)
        def project_many(ctx: HandlerContext, evs: Sequence[Envelope]) -> None:
            with ctx.conn.cursor() as cur:
                cur.executemany(upsert, [_row(e) for e in evs])
    elif handler == "execute":
        @registry.on("CaseOpened", kind=HandlerKind.PROJECTION)
        def project(ctx: HandlerContext, e: Envelope) -> None:
            ctx.conn.execute(upsert, _row(e))
    elif handler == "cursor":
        @registry.on("CaseOpened", kind=HandlerKind.PROJECTION)
        def project_on_cursor(ctx: HandlerContext, e: Envelope) -> None:
            ctx.cursor.execute(upsert, _row(e))
    else:
        raise ValueError(f"handler must be batch, execute or cursor, got {handler!r}")

    pool = ConnectionPool(dsn, min_size=members, max_size=members + 1, open=True)
    group_topic = None
    if members > 1:
        # The group starts on an empty topic and the events are put on it once every member
        # has its assignment: on the topic filled beforehand the first member applied all of
        # them before the last one joined, and the clock counted nothing.
        group_topic = f"{topic}.{consumer.rsplit('-', 1)[-1]}.group"
        create_topic(bootstrap, group_topic, partitions)
    args = ([group_topic or topic], registry, codec, pool, {"bootstrap.servers": bootstrap},
            ConsumerSettings(batch_size=batch, poll_timeout_s=0.2))
    rt: Any = (ConsumerRuntime(consumer, *args) if members == 1
               else ConsumerGroup(members, consumer, *args))
    stop = threading.Event()
    t_start = time.perf_counter()
    th = threading.Thread(target=rt.run, args=(stop,), daemon=True)
    th.start()
    rt.ready.wait(60)
    t_ready = time.perf_counter()
    before = rt.stats.applied
    if group_topic is not None:
        produce_encoded(bootstrap, group_topic, encoded)  # inside the clock: ~0.1-0.3 s
    while rt.stats.applied < n:
        if not th.is_alive():
            raise SystemExit("runtime died")
        time.sleep(0.01)
    t_end = time.perf_counter()
    stop.set()
    th.join(30)
    pool.close()
    del t_start
    return t_end - t_ready, n - before, rt.stats


@contextlib.contextmanager
def _retry_lookup(on: bool) -> Any:
    """``on=False``: the fast path's ``consumer_retry`` lookup becomes a no-op (A/B only)."""
    from casestream.consumer import batch_fast

    if on:
        yield
        return
    query, read = batch_fast.query_retries, batch_fast.read_retries
    batch_fast.query_retries = lambda *a, **k: None  # type: ignore[assignment]
    batch_fast.read_retries = lambda cur: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        batch_fast.query_retries, batch_fast.read_retries = query, read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--aggregates", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=500)
    infra_arguments(ap)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds of B2, B4 and both runtime variants (best-of/median)")
    ap.add_argument("--members", type=int, default=2,
                    help="members of the ConsumerGroup variant (one process, one connection each)")
    ap.add_argument("--copy", action="store_true", help="also measure the COPY variant of B4")
    ap.add_argument("--no-tracing", action="store_true",
                    help="replace the consumer's per-message tracing hooks (casestream.telemetry"
                         " consume_span / consume_batch_span) with no-ops, to separate their cost")
    ap.add_argument("--retry-lookup-ab", action="store_true",
                    help="also run the batch-handler runtime with the fast path's consumer_retry"
                         " lookup replaced by a no-op (its cost, same run; not a valid mode)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the bench's database and topics (default: drop them)")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off (labelled: not production durability)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    durable = durability(args.fast)
    with own_database(args.dsn, f"bench_consumer_{uuid.uuid4().hex[:8]}", keep=args.keep) as dsn:
        args.dsn = dsn
        measure(args, durable)


def measure(args: argparse.Namespace, durable: str) -> None:
    """The rounds of :func:`main`, in the database ``args.dsn`` (the bench's own)."""
    check_durability(args.dsn, args.fast)

    if args.no_tracing:
        import contextlib

        from casestream import telemetry

        telemetry.consume_span = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]
        telemetry.consume_batch_span = (  # type: ignore[assignment]
            lambda *a, **k: contextlib.nullcontext())
    run = uuid.uuid4().hex[:8]
    topic = f"bench.consumer.{run}"
    n = args.events
    codec = real_codec(args.registry_url, fallback=True)
    evs = events(n, args.aggregates)
    # the group variant's records, encoded beforehand (it produces them inside its clock)
    encoded = [(e.aggregate_id.encode(), codec.encode(e), headers_of(e)) for e in evs]
    # The envelopes and the encoded records are harness data, which no service process holds:
    # frozen, like a service's start-up objects (casestream.service.gctune), so that no full
    # collection in the runtime under test walks them (unfrozen they cost the group of 2
    # ~1,000 events/s).
    frozen = freeze_startup_objects()
    print(f"bench/consumer: {n} events, {args.aggregates} aggregates, {args.partitions} partitions,"
          f" batch {args.batch_size}, EnvelopeCodec over the {codec.registry_kind} registry,"
          f" tracing hooks {'off' if args.no_tracing else 'on'}, {frozen:,} objects frozen, {durable}")
    create_topic(args.bootstrap, topic, args.partitions)
    secs = produce_all(args.bootstrap, topic, codec, evs)
    print(f"  produced in {secs:.1f} s ({n / secs:,.0f}/s); avg value {len(codec.encode(evs[0]))} B")

    kinds = ("rtb", "rtg", "rt", "rtc", "b4", "copy", "rtn")
    tables = {(k, r): f"bench_view_{k}_{run}_{r}" for k in kinds for r in range(args.rounds)}
    consumers = {(k, r): f"bench.{k}-{run}-{r}" for k in kinds for r in range(args.rounds)}
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        ensure_schema(conn)
        for t in tables.values():
            conn.execute(projection_ddl(t))
    rates: dict[str, list[float]] = {k: [] for k in ("b2", "b4", "copy", "rtb", "rtg", "rt", "rtc",
                                                     "rtn")}
    variants = [("rtb", "batch", 1), ("rtg", "batch", args.members), ("rt", "execute", 1),
                ("rtc", "cursor", 1)]
    if args.retry_lookup_ab:
        variants.append(("rtn", "batch", 1))
    try:
        for r in range(args.rounds):
            print(f"  round {r + 1}/{args.rounds} (load average {load_average()}):")
            rates["b2"].append(n / b2_consume_decode(args.bootstrap, topic, n, codec,
                                                      args.batch_size))
            rates["b4"].append(n / b4_sql(args.dsn, evs, tables[("b4", r)],
                                          consumers[("b4", r)], args.batch_size))
            if args.copy:
                rates["copy"].append(n / b4_copy(args.dsn, evs, tables[("copy", r)],
                                                 consumers[("copy", r)], args.batch_size))
            # the two per-event variants swap places every round: each later run finds a
            # larger inbox, which would favour whichever always ran first
            order = variants if r % 2 == 0 else [*variants[:2], variants[3], variants[2],
                                                  *variants[4:]]
            for key, handler, members in order:
                with _retry_lookup(key != "rtn"):
                    secs, counted, stats = runtime_run(args.bootstrap, args.dsn, topic, n, codec,
                                                      tables[(key, r)], consumers[(key, r)],
                                                      args.batch_size, handler=handler,
                                                      members=members, encoded=encoded,
                                                      partitions=args.partitions)
                with psycopg.connect(args.dsn) as conn:
                    rows, maxv = conn.execute(
                        f"SELECT count(*), max(version) FROM {tables[(key, r)]}").fetchone()
                assert rows == args.aggregates and maxv == n // args.aggregates, (rows, maxv)
                assert stats.fast_batches == stats.batches, stats
                rates[key].append(counted / secs)
            b4 = rates["b4"][-1]
            print(f"    B2 {rates['b2'][-1]:>8,.0f}/s   B4 {b4:>7,.0f}/s"
                  + (f"   B4-copy {rates['copy'][-1]:>7,.0f}/s" if args.copy else "")
                  + f"   runtime batch-handler {rates['rtb'][-1]:>7,.0f}/s"
                  f" ({rates['rtb'][-1] / b4:.2f} x B4)   same, group of {args.members}"
                  f" {rates['rtg'][-1]:>7,.0f}/s ({rates['rtg'][-1] / b4:.2f} x B4)"
                  f"   per-event {rates['rt'][-1]:>7,.0f}/s"
                  f" ({rates['rt'][-1] / b4:.2f} x B4)"
                  f"   per-event on ctx.cursor {rates['rtc'][-1]:>7,.0f}/s"
                  f" ({rates['rtc'][-1] / b4:.2f} x B4)"
                  + (f"   batch-handler without the retry lookup {rates['rtn'][-1]:>7,.0f}/s"
                     f" ({rates['rtn'][-1] / b4:.2f} x B4)" if args.retry_lookup_ab else ""))
        best = {k: max(v) for k, v in rates.items() if v}
        print(f"  best of {args.rounds}: B2 {best['b2']:,.0f}/s, B4 {best['b4']:,.0f}/s"
              + (f", B4-copy {best['copy']:,.0f}/s" if args.copy else ""))
        for key, label in (("rtb", "batch handler (executemany)"),
                           ("rtg", f"batch handler, ConsumerGroup of {args.members} members"),
                           ("rt", "per-event handler (ctx.conn.execute)"),
                           ("rtc", "per-event handler (ctx.cursor.execute)")):
            ratios = [a / b for a, b in zip(rates[key], rates["b4"], strict=True)]
            rate = best[key]
            print(f"  runtime, {label}: best {rate:,.0f} events/s; x B2 {rate / best['b2']:.2f};"
                  f" x B4 per round {', '.join(f'{x:.2f}' for x in ratios)}"
                  f" -> >= 8,000/s {'OK' if rate >= 8000 else 'MISSED'},"
                  f" >= 0.5 x B4 {'OK' if sorted(ratios)[len(ratios) // 2] >= 0.5 else 'MISSED'}"
                  " (median round)")
        json_record("consumer", durability=durable.split()[0], events=n, batch_size=args.batch_size,
                    members=args.members, rates={k: [round(x) for x in v] for k, v in rates.items()
                                                 if v},
                    ratios_b4={k: [round(a / b, 3) for a, b in zip(rates[k], rates["b4"])]
                               for k in ("rtb", "rtg", "rt", "rtc", "rtn") if rates[k]})
    finally:
        close_codec(codec)
        if not args.keep:  # the database goes with own_database
            from confluent_kafka.admin import AdminClient

            AdminClient({"bootstrap.servers": args.bootstrap}).delete_topics(
                [topic] + [f"{consumers[(k, r)]}.{sfx}" for k in ("rt", "rtc", "rtb", "rtg", "rtn")
                           for r in range(args.rounds) for sfx in ("dlq", "redrive")])


if __name__ == "__main__":
    main()
