"""bench/relay: outbox relay throughput and commit → topic latency, against baselines.

In one run, on the real PostgreSQL and Kafka of ``deploy/infra.sh``:

* fill: N events (default 100,000) over A aggregates (1,000), ~300-byte payloads, written
  with ``OutboxWriter`` in random aggregate order (not timed as relay work);
* **B1** raw produce: a confluent-kafka loop producing the same key/value/headers with the
  relay's producer settings (idempotence, acks=all, linger.ms=1), waiting for every
  delivery report;
* **B5** claim-and-mark: the relay's claim query + outcome UPDATE/DELETE loop on an
  identical copy of the table, without Kafka;
* **relay**: ``OutboxRelay.run_once`` until the table is drained;
* ratios relay/B1, relay/B5, relay/min(B1, B5) (target >= 15,000 events/s and >= 0.5);
* CPU µs per event of B5 and of the relay: this process (all its threads, librdkafka's too)
  and PostgreSQL (postmaster and backends, from ``/proc``);
* **latency**: a relay thread idle on LISTEN; a writer process commits R events/s (default
  1,000) one event per transaction (an autocommit INSERT of a pre-encoded row) for S seconds; a consumer process (``Consumer.poll``,
  ``fetch.min.bytes=1``, so the broker answers a fetch as soon as a record is there) records
  the arrival of each; latency = arrival - commit returned (both CLOCK_MONOTONIC). p50/p99/max
  in ms (target p99 <= 50 ms), split at the record's CreateTime (wall clock, ms) into
  commit -> produce() (the relay) and produce() -> arrival (broker and consumer). Writers and
  reader run in their own processes so they do not take the relay's GIL.

Usage: ``python bench/relay.py [--events 100000] [--aggregates 1000] [--payload 300]
[--batch-size 1000] [--retention-s 3600|0] [--rate 1000] [--seconds 10]``.
Prints one human summary, the load average and a final one-line JSON record (``BENCH {...}``).
Every connection of this process and of the writer/reader processes it starts (the relay's
too) runs with ``synchronous_commit=on`` (libpq ``PGOPTIONS``) unless ``--fast`` (labelled).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

from casestream.kafka.config import producer_config
from casestream.outbox.writer import OutboxWriter, headers_for
from casestream.outbox.relay import OutboxRelay, RelaySettings
from casestream.outbox.relay import store
from casestream.outbox.relay.leases import LeaseManager
from casestream.testing.relay import FakeEnvelope, JsonCodec, create_topics, delete_topics, isolated_schema

from common import check_durability, durability, json_record, load_average, postgres_cpu_s

PG = os.environ.get("CASESTREAM_BENCH_PG") or (
    os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432").rstrip("/")
    + "/casestream_test")
KAFKA = os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def make_envs(events: int, aggregates: int, payload: int) -> list[FakeEnvelope]:
    """``events`` envelopes over ``aggregates`` aggregates in random order, versions 1.. each."""
    rng = random.Random(42)
    versions: dict[str, int] = {}
    envs = []
    for _ in range(events):
        agg = f"agg-{rng.randrange(aggregates)}"
        versions[agg] = versions.get(agg, 0) + 1
        envs.append(FakeEnvelope(aggregate_type="case", aggregate_id=agg,
                                 aggregate_version=versions[agg], payload_size=payload))
    return envs


def fill(dsn: str, envs: list[FakeEnvelope]) -> float:
    writer = OutboxWriter(JsonCodec())
    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        for i in range(0, len(envs), 500):
            with conn.transaction():
                writer.append(conn, envs[i:i + 500])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE outbox")
    return time.perf_counter() - t0


def bench_b1(envs: list[FakeEnvelope], topic: str) -> float:
    codec = JsonCodec()
    msgs = [(e.aggregate_id.encode(), codec.encode(e),
             headers_for(str(e.event_id), e.event_type, e.event_version, e.traceparent, e.correlation_id))
            for e in envs]
    p = Producer(producer_config(KAFKA, client_id="bench-b1"))
    p.produce(topic, b"warm-up", key=b"warm")
    p.flush(30)
    done = [0]

    def cb(err, msg) -> None:
        if err is None:
            done[0] += 1

    t0 = time.perf_counter()
    for key, value, headers in msgs:
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=headers, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    assert done[0] == len(msgs), done
    return len(msgs) / elapsed


def cpu_now() -> tuple[float, float]:
    """(this process's CPU s, all threads: the relay and its librdkafka threads; PostgreSQL's
    CPU s)."""
    return time.process_time(), postgres_cpu_s()


def cpu_per_event(since: tuple[float, float], events: int) -> dict[str, float]:
    """CPU µs per event of this process and of PostgreSQL since ``since`` (:func:`cpu_now`)."""
    proc, pg = cpu_now()
    return {"process": round((proc - since[0]) / events * 1e6, 1),
            "postgres": round((pg - since[1]) / events * 1e6, 1)}


def bench_b5(dsn: str, batch: int, delete: bool) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        leases = LeaseManager("b5/owner", "b5", 60.0)
        leases.rebalance(conn)
        total = 0
        t0 = time.perf_counter()
        offset = 0
        while True:
            rows = store.claim(conn, leases.held, batch)
            if not rows:
                break
            now_ms = int(time.time() * 1000)
            delivered = [store.Delivered(r.id, now_ms, 0, offset + i) for i, r in enumerate(rows)]
            offset += len(rows)
            store.mark_outcomes(conn, delivered=delivered, retry=[], failed=[], delete_published=delete)
            total += len(rows)
        elapsed = time.perf_counter() - t0
        leases.release_all(conn)
    return total / elapsed


def bench_relay(dsn: str, prefix: str, batch: int, retention: float, n: int) -> tuple[float, dict]:
    relay = OutboxRelay(dsn, producer_config(KAFKA, client_id="bench-relay"),
                        RelaySettings(topic_prefix=prefix, batch_size=batch, published_retention_s=retention,
                                      metrics_interval_s=3600, cleanup_interval_s=3600),
                        "bench-relay")
    relay.run_once()  # leases, producer, first batch: warm-up, not timed
    warm = relay.metrics.published_total
    t0 = time.perf_counter()
    while relay.metrics.published_total < n:
        if relay.run_once() == 0:
            break
    elapsed = time.perf_counter() - t0
    counted = relay.metrics.published_total - warm
    snap = relay.metrics.snapshot()
    relay.close()
    return counted / elapsed, snap


def _latency_consumer(topic: str, ready: Any, stop: Any, out: Any) -> None:
    """Child process: record the arrival time (CLOCK_MONOTONIC, shared by all processes on
    Linux) of every message on ``topic`` from now on; send {event id: arrival} at ``stop``."""
    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": f"lat-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.min.bytes": 1,
                         "fetch.wait.max.ms": 100, "auto.offset.reset": "latest"})
    md = consumer.list_topics(topic, timeout=10)
    parts = list(md.topics[topic].partitions)
    wm = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts]
    consumer.assign([TopicPartition(topic, p, o) for p, o in zip(parts, wm)])
    arrivals: dict[str, float] = {}
    consumer.consume(1, 0.5)  # fetch sessions up before the writers start
    ready.set()
    # poll() returns as soon as one record is there (consume(n, t) would wait for n or t).
    # A short fetch.wait.max.ms would not help: with fetch.min.bytes=1 the broker already
    # answers at the first record, and an idle fetch every ms costs the shared 2 cores.
    while not stop.is_set():
        m = consumer.poll(0.1)
        if m is not None and not m.error():
            # (arrival, producer CreateTime in wall-clock ms, arrival in wall-clock ms)
            arrivals[dict(m.headers())["id"].decode()] = (time.monotonic(), m.timestamp()[1], time.time() * 1000)
    consumer.close()
    out.put(arrivals)


_LEAN_INSERT = ("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version,"
                " event_version, correlation_id, occurred_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)")


def _latency_writers(dsn: str, rate: float, seconds: float, out: Any, writers: int = 2) -> None:
    """Child process: ``writers`` connections commit ``rate`` events/s in total, one event per
    transaction (one autocommit INSERT of a row encoded beforehand), for ``seconds``; send
    ({event id: (commit returned monotonic, wall ms)}, achieved rate).

    A lean load generator on purpose: through ``OutboxWriter.append`` each event is
    BEGIN + INSERT + COMMIT, ~0.5 ms of psycopg client CPU, so the generator alone took half
    a core of this 2-core box from PostgreSQL, Kafka and the relay under test."""
    committed: dict[str, tuple[float, float]] = {}
    n = int(rate * seconds)
    done_rates: list[float] = []
    codec = JsonCodec()

    def write_share(w: int) -> None:
        share = n // writers
        interval = writers / rate
        versions: dict[str, int] = {}
        rng = random.Random(w)
        rows = []
        for _ in range(share):
            agg = f"lat-{w}-{rng.randrange(500)}"
            versions[agg] = versions.get(agg, 0) + 1
            e = FakeEnvelope(aggregate_type="case", aggregate_id=agg,
                             aggregate_version=versions[agg], payload_size=300)
            rows.append((e.event_id, e.aggregate_type, e.aggregate_id, e.event_type, codec.encode(e),
                         e.aggregate_version, e.event_version, e.correlation_id, e.occurred_at))
        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter() + w * interval / writers
            for i, row in enumerate(rows):
                delay = start + i * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                conn.execute(_LEAN_INSERT, row)
                committed[row[0]] = (time.monotonic(), time.time() * 1000)
            done_rates.append(share / (time.perf_counter() - start))

    threads = [threading.Thread(target=write_share, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((committed, sum(done_rates)))


def bench_latency(base: str, prefix: str, rate: float, seconds: float) -> dict:
    """Relay thread in this process; writers and the consumer in two child processes, so
    the load generator and the clock-reader do not compete with the relay for this
    process's GIL (as they would not in production)."""
    ctx = multiprocessing.get_context("spawn")
    with isolated_schema(base, prefix="bench_lat") as dsn:
        topic = prefix + "case"
        relay = OutboxRelay(dsn, producer_config(KAFKA, client_id="bench-lat"),
                            RelaySettings(topic_prefix=prefix, metrics_interval_s=3600), "bench-lat")
        stop = threading.Event()
        rt = threading.Thread(target=relay.run, args=(stop,), daemon=True)
        rt.start()
        ready, cstop, arrivals_q, commits_q = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        cp = ctx.Process(target=_latency_consumer, args=(topic, ready, cstop, arrivals_q))
        cp.start()
        ready.wait(30)
        time.sleep(1.0)
        wp = ctx.Process(target=_latency_writers, args=(dsn, rate, seconds, commits_q))
        wp.start()
        committed, achieved = commits_q.get(timeout=seconds * 5 + 60)
        wp.join()
        time.sleep(2.0)  # the last events' way to the consumer
        cstop.set()
        arrivals = arrivals_q.get(timeout=60)
        cp.join()
        stop.set()
        rt.join(30)
        n = len(committed)
        both = [(committed[k], arrivals[k]) for k in committed if k in arrivals]
        lat = sorted((a[0] - c[0]) * 1000 for c, a in both)
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
        # Split at the producer's CreateTime (wall clock, ms resolution): commit -> produce()
        # is the relay's claim delay, produce() -> arrival is the broker and the consumer.
        to_produce = statistics.quantiles([a[1] - c[1] for c, a in both], n=100) if len(both) > 1 else [0.0] * 99
        to_arrive = statistics.quantiles([a[2] - a[1] for c, a in both], n=100) if len(both) > 1 else [0.0] * 99
        return {"relay_batches": relay.metrics.batches_total,
                "mean_batch": round(relay.metrics.published_total / max(1, relay.metrics.batches_total), 1),
                "rate_target": rate, "rate_achieved": round(achieved, 1), "events": n,
                "received": len(lat), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2),
                "max_ms": round(lat[-1], 2) if lat else None,
                "commit_to_produce_p50_p99_ms": [round(to_produce[49], 1), round(to_produce[98], 1)],
                "produce_to_arrival_p50_p99_ms": [round(to_arrive[49], 1), round(to_arrive[98], 1)]}


def main() -> None:
    ap = argparse.ArgumentParser(description="outbox relay benchmark")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--aggregates", type=int, default=1_000)
    ap.add_argument("--payload", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument("--retention-s", type=float, default=3600.0,
                    help="relay mode: >0 marks rows published (kept), 0 deletes on publish")
    ap.add_argument("--rate", type=float, default=1_000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--latency-only", action="store_true")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off (labelled: not production durability)")
    args = ap.parse_args()
    label = durability(args.fast)
    check_durability(PG, args.fast)
    print(f"bench/relay: {label}; load average {load_average()}")

    prefix = f"bench{uuid.uuid4().hex[:8]}.outbox.event."
    topics = [prefix + "case", prefix + "b1"]
    create_topics(KAFKA, topics, partitions=6)
    delete = args.retention_s == 0
    result: dict = {"events": args.events, "aggregates": args.aggregates, "payload_bytes": args.payload,
                    "batch_size": args.batch_size, "mode": "delete" if delete else "mark-published",
                    "cpus": os.cpu_count(), "durability": label.split()[0]}
    if args.latency_only:
        try:
            result["latency"] = bench_latency(PG, prefix, args.rate, args.seconds)
        finally:
            delete_topics(KAFKA, topics)
        lat = result["latency"]
        print(f"commit->topic at {lat['rate_achieved']} ev/s: p50 {lat['p50_ms']} ms, "
              f"p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms")
        print(f"  split p50/p99: commit->produce {lat['commit_to_produce_p50_p99_ms']} ms, "
              f"produce->arrival {lat['produce_to_arrival_p50_p99_ms']} ms")
        print(f"load average {load_average()}")
        json_record("relay", **result)
        return
    try:
        envs = make_envs(args.events, args.aggregates, args.payload)
        with isolated_schema(PG, prefix="bench_b5") as b5_dsn, isolated_schema(PG, prefix="bench_relay") as dsn:
            result["fill_s_b5"] = round(fill(b5_dsn, envs), 2)
            result["fill_s_relay"] = round(fill(dsn, envs), 2)
            result["b1_events_s"] = round(bench_b1(envs, prefix + "b1"))
            cpu = cpu_now()
            result["b5_events_s"] = round(bench_b5(b5_dsn, args.batch_size, delete))
            result["b5_cpu_us_per_event"] = cpu_per_event(cpu, args.events)
            cpu = cpu_now()
            relay_rate, snap = bench_relay(dsn, prefix, args.batch_size, args.retention_s, args.events)
            result["relay_events_s"] = round(relay_rate)
            result["relay_cpu_us_per_event"] = cpu_per_event(cpu, args.events)
            with psycopg.connect(dsn) as conn:
                left = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0]
            assert left == 0, f"{left} rows left pending"
        result["relay_vs_b1"] = round(result["relay_events_s"] / result["b1_events_s"], 3)
        result["relay_vs_b5"] = round(result["relay_events_s"] / result["b5_events_s"], 3)
        result["relay_vs_min"] = round(result["relay_events_s"]
                                       / min(result["b1_events_s"], result["b5_events_s"]), 3)
        if not args.skip_latency:
            # The 100,000 envelopes would make every full garbage collection in this process
            # (the relay's) walk them: tens of ms of pause that a service process does not have.
            del envs
            gc.collect()
            result["latency"] = bench_latency(PG, prefix, args.rate, args.seconds)
    finally:
        delete_topics(KAFKA, topics)
    print(f"relay {result['relay_events_s']:,} ev/s | B1 raw produce {result['b1_events_s']:,} ev/s | "
          f"B5 claim+mark {result['b5_events_s']:,} ev/s | relay/min(B1,B5) = {result['relay_vs_min']}")
    rc, bc = result["relay_cpu_us_per_event"], result["b5_cpu_us_per_event"]
    print(f"CPU µs per event: relay process {rc['process']} + PostgreSQL {rc['postgres']}; "
          f"B5 process {bc['process']} + PostgreSQL {bc['postgres']}")
    if "latency" in result:
        lat = result["latency"]
        print(f"commit->topic at {lat['rate_achieved']} ev/s: p50 {lat['p50_ms']} ms, "
              f"p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms ({lat['received']}/{lat['events']})")
        print(f"  split p50/p99: commit->produce {lat['commit_to_produce_p50_p99_ms']} ms, "
              f"produce->arrival {lat['produce_to_arrival_p50_p99_ms']} ms")
    print(f"load average {load_average()}")
    json_record("relay", **result)


if __name__ == "__main__":
    main()
