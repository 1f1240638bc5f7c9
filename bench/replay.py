"""Replay benchmark: rebuild a projection from 200,000 events; B2 in the same run.

In one run, on the same events already on a private topic (4 partitions):

- **replay** — ``casestream.replay.Replayer`` end to end (real Kafka, real PostgreSQL, real
  ``EnvelopeCodec`` with upcasters): read, decode, upcast, version guard, projection rows into
  the shadow table and checkpoint (offsets + guard rows) in one transaction per batch, then
  the locked catch-up and the swap. Default projection ``case.dashboard`` (case journeys:
  CaseOpened in schema v1/v2/v3, CaseSubmitted, CaseClosed/CaseReturned);
  ``--projection audit.timeline`` replays the audit timeline (one row per event) instead;
  ``decision.statistics`` reads decision events.
- **B2** — raw consume (``assign``, no group) + ``fastavro.schemaless_reader`` decode with
  each message's writer schema; no database.

Prints events/s of both, the ratio and the load average (1, 5, 15 min) at the end. Target
(2 cores): replay >= 20,000 events/s and >= 0.4 x B2.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/replay.py [--events 200000] [--batch-size 2000]
        [--projection case.dashboard|audit.timeline|decision.statistics] [--workers N] [--keep]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import struct
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition
from fastavro import parse_schema, schemaless_reader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from casestream.events.catalog import load_catalog  # noqa: E402
from casestream.testing.consumer import close_codec, create_topic, real_codec  # noqa: E402
from casestream.events.envelope import Envelope  # noqa: E402
from casestream.replay import ReplayOptions, Replayer, load_projection  # noqa: E402
from common import check_durability, durability, json_record, load_average, produce_all  # noqa: E402
from services import schemas_dir

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _env(kind: str, agg_type: str, agg: str, v: int, payload: dict[str, Any], tenant: str,
         at: datetime, schema: int | None = None) -> Envelope:
    return Envelope(event_id=str(uuid.uuid4()), event_type=kind, event_version=schema,
                    source=agg_type, tenant_id=tenant, aggregate_type=agg_type, aggregate_id=agg,
                    aggregate_version=v, occurred_at=at, correlation_id=agg, actor_id="officer-7",
                    payload=payload,
                    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def case_events(n: int) -> list[Envelope]:
    """``n`` case events: journeys of 3 (opened v1/v2/v3, submitted, closed or returned)."""
    out: list[Envelope] = []
    i = 0
    while len(out) < n:
        cid, tenant, at, sev = str(uuid.uuid4()), f"tenant-{i % 7}", T0 + timedelta(minutes=i), 1 + i % 5
        schema = 1 + i % 3
        p: dict[str, Any] = {"title": "Unlicensed waste disposal near the river", "severity": sev,
                             "evidence_count": 3, "reporter_email": "reporter@example.org"}
        text = "Reporter saw barrels dumped behind the depot on two nights; photos attached."
        if schema == 3:
            p |= {"summary": text, "priority": "HIGH"}
        else:
            p["description"] = text
            if schema == 2:
                p["priority"] = "LOW"
        out.append(_env("CaseOpened", "case", cid, 1, p, tenant, at, schema))
        out.append(_env("CaseSubmitted", "case", cid, 2,
                        {"title": p["title"], "severity": sev, "evidence_count": 3,
                         "reporter_email": "reporter@example.org", "submitted_by": "officer-7"},
                        tenant, at + timedelta(seconds=30)))
        if i % 2:
            out.append(_env("CaseClosed", "case", cid, 3,
                            {"outcome": "violation", "penalty_cents": 1000 * sev}, tenant,
                            at + timedelta(seconds=60)))
        else:
            out.append(_env("CaseReturned", "case", cid, 3, {"reason": "incomplete evidence"},
                            tenant, at + timedelta(seconds=60)))
        i += 1
    return out[:n]


def decision_events(n: int) -> list[Envelope]:
    """``n`` decision events (violations with penalties and no-violations)."""
    out = []
    for i in range(n):
        cid = str(uuid.uuid4())
        at = T0 + timedelta(minutes=i)
        if i % 3:
            out.append(_env("ViolationDetermined", "decision", cid, 1,
                            {"case_id": cid, "saga_id": str(uuid.uuid4()), "violation_code": "W-12",
                             "penalty_cents": 2500 + i % 1000}, f"tenant-{i % 7}", at))
        else:
            out.append(_env("NoViolationFound", "decision", cid, 1,
                            {"case_id": cid, "saga_id": str(uuid.uuid4())}, f"tenant-{i % 7}", at))
    return out


def b2_consume_decode(bootstrap: str, topic: str, n: int, codec: Any, batch: int) -> float:
    """Raw consume + fastavro decode with each message's writer schema; seconds for ``n``."""
    by_id = {}
    schemas = {(sv.event_type, sv.version): sv.schema for sv in codec.catalog.iter_versions()}
    for key, sid in codec.schema_ids.items():
        by_id[sid] = parse_schema(schemas[key])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench.replay.b2",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.max.bytes": 64 * 1024 * 1024, "queued.min.messages": 200000})
    md = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    seen = 0
    unpack = struct.Struct(">I").unpack_from
    t0 = time.perf_counter()
    try:
        while seen < n:
            for m in c.consume(batch, 1.0):
                if m.error():
                    continue
                v = m.value()
                bio = io.BytesIO(v)
                bio.seek(5)
                schemaless_reader(bio, by_id[unpack(v, 1)[0]], None)
                seen += 1
        return time.perf_counter() - t0
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                    help="replay worker processes (default: as `casestream replay`, 2 on 2+ cores)")
    ap.add_argument("--projection", default="case.dashboard",
                    choices=["case.dashboard", "audit.timeline", "decision.statistics"])
    ap.add_argument("--pg-url", default=os.environ.get("CASESTREAM_PG_URL",
                                                       "postgresql://postgres@127.0.0.1:15432"))
    ap.add_argument("--keep", action="store_true", help="keep the bench database")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off (labelled: not production durability)")
    a = ap.parse_args(argv)
    label = durability(a.fast)  # inherited by the replay's worker processes
    bootstrap = os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    codec = real_codec(os.environ.get("CASESTREAM_REGISTRY_URL"), fallback=True)
    sfx = uuid.uuid4().hex[:8]
    topic, db = f"bench.replay.{sfx}", f"bench_replay_{sfx}"
    base = a.pg_url.rstrip("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    dsn = f"{base}/{db}"
    check_durability(dsn, a.fast)
    print(f"bench/replay {a.projection}: {label}; load average {load_average()}")
    try:
        create_topic(bootstrap, topic, a.partitions)
        evs = (decision_events(a.events) if a.projection == "decision.statistics"
               else case_events(a.events))
        secs = produce_all(bootstrap, topic, codec, evs)
        print(f"produced {len(evs)} events to {topic} in {secs:.1f}s")
        del evs
        spec = load_projection(a.projection)
        spec = dataclasses.replace(spec, topics=(topic,), dsn=lambda: dsn,
                                   live_consumer=f"bench.{sfx}")
        if a.projection == "audit.timeline":
            from casestream.migrations import apply_migrations
            from services.audit.bootstrap import migrations

            apply_migrations(dsn, migrations())
        b2 = b2_consume_decode(bootstrap, topic, a.events, codec, a.batch_size)
        b2_rate = a.events / b2
        print(f"B2 (raw consume + fastavro decode): {b2_rate:,.0f} events/s ({b2:.1f}s)")
        r = Replayer(spec, codec=codec, dsn=dsn, bootstrap=bootstrap,
                     event_types=load_catalog(schemas_dir()).event_types)
        result = r.run(ReplayOptions(batch_size=a.batch_size, workers=a.workers))
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(f"SELECT count(*) FROM {spec.tables[0]}").fetchone()[0]
        print(f"replay {a.projection} (workers={a.workers}): {result.read} events, {result.applied} applied, "
              f"{rows} rows, swapped={result.swapped}: {result.rate:,.0f} events/s "
              f"({result.elapsed_s:.1f}s)")
        print(f"ratio replay / B2 = {result.rate / b2_rate:.2f}   "
              f"(targets: >= 20,000 events/s, >= 0.4 x B2)   "
              f"load average {load_average()}")
        json_record("replay", projection=a.projection, durability=label.split()[0],
                    events=result.read, workers=a.workers, replay_events_s=round(result.rate),
                    b2_events_s=round(b2_rate), ratio_b2=round(result.rate / b2_rate, 3))
    finally:
        close_codec(codec)
        if not a.keep:
            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            from confluent_kafka.admin import AdminClient

            AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])
    return 0


if __name__ == "__main__":
    sys.exit(main())
