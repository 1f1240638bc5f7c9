"""bench/debezium: Debezium (Kafka Connect + the PostgreSQL connector) against the outbox relay,
side by side in one run, rounds alternating (relay, debezium, relay, debezium, ...).

Needs ``deploy/infra.sh up connect`` (CASESTREAM_CONNECT_URL, default http://127.0.0.1:18083).
Each round has its own database ``bench_cdc_<hex>`` with ``synchronous_commit = on`` (the
local server's default is off; every commit here waits for its WAL flush) and its own topic
``<prefix>case`` (6 partitions); the connector routes there with
``route.topic.replacement=<prefix>${routedByValue}``, otherwise the configuration of
``casestream.outbox.connect.outbox_connector_config``.

Per round:

* **backlog**: N events (default 100,000) over 1,000 aggregates, ~300-byte payloads,
  written with ``OutboxWriter`` while nobody publishes (Debezium: after the slot exists,
  connector not started); then the publisher starts, and the time from its start to the
  last record on the topic (sum of the partitions' high watermarks, polled every 20 ms)
  gives events/s;
* **latency**: the publisher running, a writer process commits R events/s (default 1,000)
  over W connections (default 8: with ``synchronous_commit = on`` each commit waits for its
  WAL flush), one event per transaction, for S seconds (``bench/relay.py``'s writer and
  reader processes); latency = arrival at a consumer - commit returned, p50/p99 in ms;
* **CPU** seconds per 10,000 events, for the backlog and the latency phase: the publisher
  (relay: this process, which runs only the relay then; Debezium: the Connect JVM,
  ``/proc/<pid>/stat``) and PostgreSQL (the postmaster and its children, this stack's
  ``postmaster.pid``; the writers' backends are in it for both publishers alike).

An unmeasured warm-up backlog round per publisher comes first (``--warmup-events``, 20,000):
the Connect JVM compiles its hot paths during the first tens of thousands of events, which
a long-running worker has long done. Prints one line per round, the medians per publisher, the ratios debezium/relay, and a final
JSON line. Usage: ``python bench/debezium.py [--events 100000] [--rate 1000] [--seconds 10]
[--rounds 2] [--writers 8] [--warmup-events 20000]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from confluent_kafka import Consumer, TopicPartition

from casestream.kafka.config import producer_config
from casestream.migrations import apply_migrations, create_database
from casestream.outbox import OUTBOX_MIGRATIONS
from casestream.outbox.cdc import default_slot_name, set_publisher
from casestream.outbox.connect import ConnectClient, connector_name, outbox_connector_config
from casestream.outbox.relay import OutboxRelay, RelaySettings
from casestream.testing.relay import create_topics, delete_topics, drop_cdc_database

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import postgres_cpu_s, proc_cpu_s  # noqa: E402
from relay import _latency_consumer, _latency_writers, fill, make_envs  # noqa: E402

KAFKA = os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
PG_URL = os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432").rstrip("/")
CONNECT_URL = os.environ.get("CASESTREAM_CONNECT_URL", "http://127.0.0.1:18083")
ROOT = Path(__file__).resolve().parents[1]
LOCAL = Path(os.environ.get("CASESTREAM_LOCAL_DIR", ROOT / ".local"))


def connect_cpu_s() -> float:
    """CPU seconds of the Kafka Connect worker (``.local/connect/connect.pid``)."""
    return proc_cpu_s(int((LOCAL / "connect" / "connect.pid").read_text().split()[0]))


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def topic_records(consumer: Consumer, topic: str, partitions: list[int]) -> int:
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
               for p in partitions)


class Round:
    """One database + topic + (Debezium) connector, torn down by :meth:`close`."""

    def __init__(self, kind: str, connect: ConnectClient) -> None:
        self.kind, self.connect = kind, connect
        self.database = f"bench_cdc_{uuid.uuid4().hex[:8]}"
        self.dsn = f"{PG_URL}/{self.database}"
        self.prefix = f"bench{uuid.uuid4().hex[:8]}.outbox.event."
        self.topic = self.prefix + "case"
        self.slot = default_slot_name(self.database)
        create_database(self.dsn)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{self.database}" SET synchronous_commit = on')
        apply_migrations(self.dsn, list(OUTBOX_MIGRATIONS))
        create_topics(KAFKA, [self.topic], partitions=6)
        url = urlsplit(PG_URL)
        self.config = outbox_connector_config(self.database, host=url.hostname or "127.0.0.1",
                                              port=url.port or 5432, user=url.username or "postgres")
        self.config["transforms.outbox.route.topic.replacement"] = self.prefix + "${routedByValue}"
        self.relay: OutboxRelay | None = None
        self.relay_stop = threading.Event()
        self.relay_thread: threading.Thread | None = None
        if kind == "debezium":
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f'CREATE PUBLICATION "{self.slot}" FOR TABLE outbox')
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
                set_publisher(conn, "cdc")

    def start(self) -> None:
        if self.kind == "debezium":
            self.connect.put(connector_name(self.database), self.config)
            self.connect.wait_running(connector_name(self.database), timeout_s=120)
        else:
            self.relay = OutboxRelay(self.dsn, producer_config(KAFKA, client_id="bench-relay"),
                                     RelaySettings(topic_prefix=self.prefix, metrics_interval_s=3600,
                                                   cleanup_interval_s=3600), "bench-relay")
            self.relay_thread = threading.Thread(target=self.relay.run, args=(self.relay_stop,), daemon=True)
            self.relay_thread.start()

    def publisher_cpu_s(self) -> float:
        return connect_cpu_s() if self.kind == "debezium" else self_cpu_s()

    def close(self) -> None:
        if self.relay_thread is not None:
            self.relay_stop.set()
            self.relay_thread.join(30)
        if self.kind == "debezium":
            self.connect.delete(connector_name(self.database))
        drop_cdc_database(PG_URL, self.database, self.slot)
        delete_topics(KAFKA, [self.topic])


def backlog(r: Round, events: int) -> dict[str, float]:
    envs = make_envs(events, 1_000, 300)
    fill(r.dsn, envs)
    del envs
    watcher = Consumer({"bootstrap.servers": KAFKA, "group.id": f"bench-wm-{uuid.uuid4().hex}"})
    parts = list(watcher.list_topics(r.topic, timeout=10).topics[r.topic].partitions)
    cpu_pub, cpu_pg, t0 = r.publisher_cpu_s(), postgres_cpu_s(), time.perf_counter()
    r.start()
    deadline = t0 + 600
    while topic_records(watcher, r.topic, parts) < events:
        if time.perf_counter() > deadline:
            raise SystemExit(f"{r.kind}: backlog not on the topic after 600 s")
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    pub, pg = r.publisher_cpu_s() - cpu_pub, postgres_cpu_s() - cpu_pg
    watcher.close()
    return {"events_s": events / elapsed, "publisher_cpu_s_per_10k": pub * 10_000 / events,
            "postgres_cpu_s_per_10k": pg * 10_000 / events}


def latency(r: Round, rate: float, seconds: float, writers: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    ready, cstop, arrivals_q, commits_q = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    cp = ctx.Process(target=_latency_consumer, args=(r.topic, ready, cstop, arrivals_q))
    cp.start()
    ready.wait(30)
    time.sleep(1.0)
    cpu_pub, cpu_pg = r.publisher_cpu_s(), postgres_cpu_s()
    wp = ctx.Process(target=_latency_writers, args=(r.dsn, rate, seconds, commits_q, writers))
    wp.start()
    committed, achieved = commits_q.get(timeout=seconds * 5 + 60)
    wp.join()
    time.sleep(2.0)
    pub, pg = r.publisher_cpu_s() - cpu_pub, postgres_cpu_s() - cpu_pg
    cstop.set()
    arrivals = arrivals_q.get(timeout=60)
    cp.join()
    lat = sorted((arrivals[k][0] - c[0]) * 1000 for k, c in committed.items() if k in arrivals)
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
    n = len(committed)
    return {"rate_achieved": achieved, "received": len(lat), "events": n, "p50_ms": q[49], "p99_ms": q[98],
            "publisher_cpu_s_per_10k": pub * 10_000 / max(1, n), "postgres_cpu_s_per_10k": pg * 10_000 / max(1, n)}


def main() -> None:
    ap = argparse.ArgumentParser(description="Debezium vs outbox relay, alternating rounds")
    ap.add_argument("--events", type=int, default=100_000, help="backlog size")
    ap.add_argument("--rate", type=float, default=1_000.0, help="latency phase, events/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="latency phase length")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per publisher (alternating)")
    ap.add_argument("--writers", type=int, default=8,
                    help="latency phase: writer connections (each commit waits for its WAL flush)")
    ap.add_argument("--warmup-events", type=int, default=20_000,
                    help="an unmeasured backlog round per publisher first (JIT of the Connect JVM)")
    args = ap.parse_args()
    connect = ConnectClient(CONNECT_URL)
    results: dict[str, list[dict[str, Any]]] = {"relay": [], "debezium": []}
    for kind in ("relay", "debezium") if args.warmup_events else ():
        r = Round(kind, connect)
        try:
            backlog(r, args.warmup_events)
        finally:
            r.close()
    for i in range(args.rounds * 2):
        kind = ("relay", "debezium")[i % 2]
        r = Round(kind, connect)
        try:
            row = {"backlog": backlog(r, args.events), "latency": latency(r, args.rate, args.seconds, args.writers)}
        finally:
            r.close()
        results[kind].append(row)
        b, lat = row["backlog"], row["latency"]
        print(f"round {i + 1} {kind:8s}: backlog {b['events_s']:,.0f} ev/s "
              f"(cpu/10k: publisher {b['publisher_cpu_s_per_10k']:.2f} s, postgres {b['postgres_cpu_s_per_10k']:.2f} s) | "
              f"at {lat['rate_achieved']:.0f} ev/s p50 {lat['p50_ms']:.1f} ms p99 {lat['p99_ms']:.1f} ms "
              f"({lat['received']}/{lat['events']}; cpu/10k: publisher {lat['publisher_cpu_s_per_10k']:.2f} s, "
              f"postgres {lat['postgres_cpu_s_per_10k']:.2f} s)", flush=True)
    summary: dict[str, dict[str, float]] = {}
    for kind, rows in results.items():
        summary[kind] = {f"{phase}.{k}": round(statistics.median(r[phase][k] for r in rows), 3)
                         for phase in ("backlog", "latency") for k in rows[0][phase]}
    ratios = {k: round(summary["debezium"][k] / summary["relay"][k], 3) if summary["relay"][k] else None
              for k in summary["relay"] if not k.endswith(("events", "received", "rate_achieved"))}
    print("medians (synchronous_commit=on):")
    for k in ratios:
        print(f"  {k:40s} relay {summary['relay'][k]:>12,.3f}   debezium {summary['debezium'][k]:>12,.3f}"
              f"   debezium/relay {ratios[k]}")
    print(json.dumps({"events": args.events, "rate": args.rate, "seconds": args.seconds, "rounds": args.rounds,
                      "synchronous_commit": "on", "cpus": os.cpu_count(), "medians": summary, "ratios": ratios,
                      "rounds_detail": results}))
    connect.close()


if __name__ == "__main__":
    main()
