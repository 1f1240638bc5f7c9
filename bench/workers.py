"""Worker processes: consumer and relay throughput of one service instance with 1 and N workers.

One service (module ``wbench``, written to a temporary folder, composed by ``ServiceBuilder``
like any service: migrations, registry codec, pool, a consumer with a batch handler — inbox,
version guard and one projection upsert per event, as ``bench/consumer.py``'s batch variant —
and the outbox relay) is started through ``run_service`` with ``CASESTREAM_WORKERS`` = 1, then
N, alternating for ``--rounds``. In each round, in a database and on topics of its own:

- **consumer**: once the group has as many members as workers and every partition of its
  ``--partitions``-partition topic is assigned, the clock starts and ``--events`` CaseOpened
  events (encoded beforehand) are produced; it stops when the projection holds a row per
  aggregate at its last version and the inbox a row per event (checked, else the round fails);
- **relay**: once the workers hold every relay shard lease between them, ``--events`` outbox
  rows are committed in one transaction; the clock runs from that commit until every row is
  ``published``; then the topic is read back: every row's event id must be on it.

Printed per round: events/s for consumer and relay, and the N-worker figure as a multiple of
the 1-worker figure of the same round pair; the load average beside each; a final ``BENCH``
JSON line. ``synchronous_commit=on`` on every connection (``common.durability``). The box has
2 cores, which PostgreSQL and Kafka share with the workers: read the ratio, not the absolute.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/workers.py [--events 40000] [--aggregates 4000] [--partitions 4]
        [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition

from casestream.outbox.writer import OutboxWriter
from casestream.testing.consumer import close_codec, create_topic, headers_of, real_codec
from casestream.testing.relay import FakeEnvelope, JsonCodec, delete_topics

from common import check_durability, durability, infra_arguments, json_record, load_average, produce_encoded
from consumer import UPSERT, events, projection_ddl

SERVICE_MODULE = r'''
import os
from pathlib import Path
from typing import Sequence

from pydantic import Field
from starlette.applications import Starlette

from casestream.handlers import HandlerKind, HandlerRegistry
from casestream.service import ServiceBuilder, ServiceSettings, ServiceSpec, service_config
from services import schemas_dir

CONSUMER = os.environ["WBENCH_CONSUMER"]
TOPIC = os.environ["WBENCH_TOPIC"]
UPSERT = os.environ["WBENCH_UPSERT"]
SERVICE = ServiceSpec(name="wbench", module="wbench", settings="wbench:Settings", build="wbench:build",
                      consumers=(CONSUMER,), subscriptions={CONSUMER: (TOPIC,)})


class Settings(ServiceSettings):
    model_config = service_config("CASESTREAM_WBENCH_")
    database: str = Field(description="database")
    port: int = Field(0, description="HTTP port")


def project_many(ctx, evs):
    with ctx.conn.cursor() as cur:
        cur.executemany(UPSERT, [(e.aggregate_id, e.tenant_id, e.payload["title"], e.payload["severity"],
                                  e.payload["priority"], e.aggregate_version, e.occurred_at) for e in evs])


def build(settings=None):
    b = ServiceBuilder(SERVICE, settings, schemas=[schemas_dir()],
                       migrations=Path(__file__).parent / "wbench_migrations").start()
    registry = HandlerRegistry()
    registry.add_batch("CaseOpened", project_many, kind=HandlerKind.PROJECTION)
    b.consumer(CONSUMER, [TOPIC], registry)
    b.relay()
    return b.build(app=Starlette(), ready_table="bench_proj")


if __name__ == "__main__":
    from casestream.service import run_service

    run_service(build, spec=SERVICE)
'''


def free_port() -> int:
    """A free port below 32768, off the suite's fixed ports."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit("no free port in 20000-32000")


def wait(what: str, check: Any, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"service exited ({proc.returncode}) while waiting for {what}:\n"
                             + log.read_text()[-3000:])
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}\n" + log.read_text()[-3000:])


def group_settled(bootstrap: str, group: str, topic: str, members: int, partitions: int) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # noqa: BLE001 - the group does not exist yet
        return False
    held = [[tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic] for m in desc.members]
    return (len(held) == members and all(held)
            and sorted(p for ps in held for p in ps) == list(range(partitions)))


def one_round(args: argparse.Namespace, workers: int, round_no: int, folder: Path,
              encoded: list[tuple[bytes, bytes, Any]], expect_proj: dict[str, int]) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    database = f"bench_workers_{suffix}"
    topic = f"bench.workers.{suffix}"
    group = f"bench.workers-{suffix}"
    aggregate_type = f"wb{suffix}"
    relay_topic = f"outbox.event.{aggregate_type}"
    base = args.dsn.rsplit("/", 1)[0]
    dsn = f"{base}/{database}"
    create_topic(args.bootstrap, topic, args.partitions)
    create_topic(args.bootstrap, relay_topic, args.partitions)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
           "WBENCH_CONSUMER": group, "WBENCH_TOPIC": topic, "WBENCH_UPSERT": UPSERT.format(t="bench_proj"),
           "CASESTREAM_WORKERS": str(workers), "CASESTREAM_WBENCH_PORT": str(free_port()),
           "CASESTREAM_WBENCH_DATABASE": database, "CASESTREAM_PG_URL": base,
           "CASESTREAM_KAFKA_BOOTSTRAP": args.bootstrap, "CASESTREAM_REGISTRY_URL": args.registry_url,
           "CASESTREAM_WBENCH_CONSUMER_BATCH_SIZE": str(args.batch_size),
           "CASESTREAM_WBENCH_INBOX_RETENTION_INTERVAL_S": "0",
           "CASESTREAM_WBENCH_DEAD_LETTER_DEPTH_INTERVAL_S": "0",
           "CASESTREAM_TELEMETRY_LOG_FORMAT": "text", "CASESTREAM_LOG_LEVEL": "WARNING"}
    log = folder / f"service-{round_no}-{workers}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "wbench"], cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait("the group", lambda: group_settled(args.bootstrap, group, topic, workers, args.partitions),
             120, proc, log)
        # consumer
        load_c = load_average()
        t0 = time.perf_counter()
        produce_encoded(args.bootstrap, topic, encoded)

        def applied() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s",
                                    (group,)).fetchone()[0] >= len(encoded)

        wait("every event applied", applied, 600, proc, log)
        consumer_s = time.perf_counter() - t0
        with psycopg.connect(dsn) as conn:
            inbox = conn.execute("SELECT count(*), count(DISTINCT event_id) FROM consumer_inbox "
                                 "WHERE consumer = %s", (group,)).fetchone()
            proj = dict(conn.execute("SELECT case_id, version FROM bench_proj").fetchall())
        if inbox != (len(encoded), len(encoded)) or proj != expect_proj:
            raise SystemExit(f"consumer result wrong: inbox {inbox}, {len(proj)} projection rows "
                             f"({sum(proj.get(k) == v for k, v in expect_proj.items())} at their last version)")
        # relay
        def leases() -> bool:
            with psycopg.connect(dsn) as conn:
                held = conn.execute("SELECT count(*), count(DISTINCT locked_by) FROM outbox_relay_lease "
                                    "WHERE locked_until > now() AND locked_by IS NOT NULL").fetchone()
            return held == (32, workers)

        wait("the relay shards held by every worker", leases, 120, proc, log)
        rng = random.Random(7)
        versions: dict[str, int] = {}
        envs = []
        for _ in range(args.events):
            agg = f"agg-{rng.randrange(args.aggregates)}"
            versions[agg] = versions.get(agg, 0) + 1
            envs.append(FakeEnvelope(aggregate_type=aggregate_type, aggregate_id=agg,
                                     aggregate_version=versions[agg], payload_size=200))
        load_r = load_average()
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                OutboxWriter(JsonCodec()).append(conn, envs)
            t1 = time.perf_counter()  # committed: the relay may take the rows from now

        def published() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT count(*) FROM outbox WHERE status = 'published'").fetchone()[0] \
                    >= len(envs)

        wait("every outbox row published", published, 600, proc, log)
        relay_s = time.perf_counter() - t1
        on_topic = read_ids(args.bootstrap, relay_topic, args.partitions)
        missing = {e.event_id for e in envs} - on_topic
        if missing:
            raise SystemExit(f"relay: {len(missing)} published rows not on {relay_topic}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        delete_topics(args.bootstrap, (topic, relay_topic, f"{group}.dlq", f"{group}.redrive"))
    return {"workers": workers, "consumer_eps": len(encoded) / consumer_s, "relay_eps": len(envs) / relay_s,
            "load_consumer": load_c, "load_relay": load_r}


def read_ids(bootstrap: str, topic: str, partitions: int) -> set[str]:
    """Event ids (header ``id``) of every record on ``topic``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    ids: set[str] = set()
    left = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        for msg in c.consume(10000, 1.0):
            if msg.error():
                continue
            ids.update(v.decode() for k, v in (msg.headers() or []) if k == "id")
            if msg.offset() + 1 >= ends[msg.partition()]:
                left.discard(msg.partition())
    c.close()
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--aggregates", type=int, default=4_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--workers", type=int, default=2, help="the N measured beside 1 worker")
    ap.add_argument("--rounds", type=int, default=2, help="round pairs (1 worker, then N; order swapped every pair)")
    infra_arguments(ap)
    args = ap.parse_args()
    label = durability(False)
    check_durability(args.dsn, False)
    codec = real_codec(args.registry_url, fallback=True)
    evs = events(args.events, args.aggregates)
    encoded = [(e.aggregate_id.encode(), codec.encode(e), headers_of(e)) for e in evs]
    expect = {}
    for e in evs:
        expect[e.aggregate_id] = max(expect.get(e.aggregate_id, 0), e.aggregate_version)
    close_codec(codec)
    print(f"workers bench: {args.events:,} events over {args.aggregates:,} aggregates, "
          f"{args.partitions} partitions, batch {args.batch_size}, 1 vs {args.workers} workers, "
          f"{label}, {os.cpu_count()} cores, load {load_average()}")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        folder = Path(tmp)
        (folder / "wbench.py").write_text(SERVICE_MODULE, encoding="utf-8")
        (folder / "wbench_migrations").mkdir()
        (folder / "wbench_migrations" / "001_proj.sql").write_text(projection_ddl("bench_proj") + ";\n")
        for r in range(args.rounds):
            order = (1, args.workers) if r % 2 == 0 else (args.workers, 1)
            pair = {}
            for w in order:
                res = one_round(args, w, r, folder, encoded, expect)
                pair[w] = res
                results.append({"round": r + 1, **res})
                print(f"  round {r + 1}, {w} worker(s): consumer {res['consumer_eps']:8,.0f} ev/s "
                      f"(load {res['load_consumer']}), relay {res['relay_eps']:8,.0f} ev/s "
                      f"(load {res['load_relay']})", flush=True)
            one, many = pair[1], pair[args.workers]
            print(f"  round {r + 1}: {args.workers} workers = consumer "
                  f"{many['consumer_eps'] / one['consumer_eps']:.2f} x, relay "
                  f"{many['relay_eps'] / one['relay_eps']:.2f} x the 1-worker figure", flush=True)
    json_record("workers", events=args.events, partitions=args.partitions, workers=args.workers,
                durability=label, rounds=results)


if __name__ == "__main__":
    main()
