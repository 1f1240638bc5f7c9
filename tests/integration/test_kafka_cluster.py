"""The library on a three-broker KRaft cluster: a broker dies under load, two brokers stop.

The cluster is started by the project's launcher (``deploy/infra.sh up kafka`` with
``CASESTREAM_KAFKA_BROKERS=3``, its own ``CASESTREAM_LOCAL_DIR`` and ports), so killing its
brokers disturbs nobody. Outbox topics there have replication factor 3 and
``min.insync.replicas=2``. A load writer appends events steadily to an outbox; the relay
publishes them (``acks=all``, idempotent) and a consumer runtime applies them through its
inbox and aggregate-version guard into an effects table with no unique key, so a doubled
effect would show as two rows.

One cluster serves both tests (module fixture). It is throwaway, so it starts with
``CASESTREAM_KAFKA_QUICK_START=1`` (serial GC and the C1 compiler only: start-up over
throughput) and is torn down by SIGKILL of every node plus deletion of its data,
not by controlled shutdown. Marked ``cluster``: ``make test`` runs it, ``make test-cluster``
runs only it.

Ports: node n listens on ``CASESTREAM_CLUSTER_TEST_PORT`` (default CASESTREAM_KAFKA_PORT + 700)
+ 10 (n - 1), its controller one above.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from psycopg_pool import ConnectionPool

from casestream.handlers.registry import HandlerRegistry
from casestream.consumer.runtime import ConsumerRuntime
from casestream.kafka import producer_config
from casestream.outbox.relay import OutboxRelay
from casestream.testing.consumer import EffectsProjection, FramedJsonCodec, run_in_thread
from casestream.testing.relay import create_topics, read_topics
from test_relay_support import (  # noqa: F401 - fixtures
    LoadWriter,
    RelayThread,
    base_dsn,
    check_order,
    dsn,
    settings,
    wait_for,
)
from tests.support.events import case_returned

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "deploy" / "infra.sh"


@dataclass
class Cluster:
    env: dict[str, str]
    bootstrap: str
    local: Path
    down: set[int] = field(default_factory=set)

    def infra(self, *args: str, timeout_s: float = 240) -> str:
        done = subprocess.run([str(INFRA), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)
        if done.returncode != 0:
            raise AssertionError(f"deploy/infra.sh {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def kill(self, node: int) -> None:
        self.infra("kafka-node", "kill", str(node))
        self.down.add(node)

    def start(self, node: int) -> None:
        self.infra("kafka-node", "start", str(node))
        self.down.discard(node)

    def all_up(self) -> None:
        """Start again any node an earlier test left down."""
        for node in sorted(self.down):
            self.start(node)

    def throw_away(self) -> None:
        """SIGKILL every node still running and delete the nodes' data: the next start formats
        a new cluster. A controlled shutdown of three nodes takes minutes on a loaded machine."""
        for node in (1, 2, 3):
            # not raising: a node that already died must not keep the others alive
            subprocess.run([str(INFRA), "kafka-node", "kill", str(node)], env=self.env,
                           capture_output=True, timeout=60)
        for node_dir in (self.local / "kafka").glob("node[0-9]*"):
            shutil.rmtree(node_dir)

    def leaders(self, topic: str) -> Counter[int]:
        """Broker id (= node number) -> partitions of ``topic`` it leads."""
        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=10)
        return Counter(p.leader for p in md.topics[topic].partitions.values())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    base = int(os.environ.get("CASESTREAM_CLUSTER_TEST_PORT")
               or int(os.environ.get("CASESTREAM_KAFKA_PORT", "19092")) + 700)
    local = REPO / ".local" / "kafka-cluster-test"
    (local / "kafka").mkdir(parents=True, exist_ok=True)
    shared_cp = REPO / ".local" / "kafka" / "classpath.txt"
    if shared_cp.is_file() and not (local / "kafka" / "classpath.txt").is_file():
        (local / "kafka" / "classpath.txt").write_text(shared_cp.read_text())
    env = {**os.environ, "CASESTREAM_LOCAL_DIR": str(local), "CASESTREAM_KAFKA_BROKERS": "3",
           "CASESTREAM_KAFKA_SECURE": "0", "CASESTREAM_KAFKA_PORT": str(base),
           "CASESTREAM_KAFKA_CONTROLLER_PORT": str(base + 1), "CASESTREAM_KAFKA_HEAP": "384m",
           "CASESTREAM_KAFKA_QUICK_START": "1"}
    c = Cluster(env=env, bootstrap=",".join(f"127.0.0.1:{base + 10 * i}" for i in range(3)), local=local)
    started = time.monotonic()
    try:
        c.infra("up", "kafka")
        print(f"cluster: three nodes ready in {time.monotonic() - started:.1f} s")
        yield c
    finally:
        stopping = time.monotonic()
        c.throw_away()
        print(f"cluster: thrown away in {time.monotonic() - stopping:.1f} s")


@dataclass
class Progress:
    """Samples (time, published rows, effects rows) every 0.1 s in a thread."""

    dsn: str
    effects: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                published, effects = conn.execute(
                    f"SELECT (SELECT count(*) FROM outbox WHERE status = 'published'),"
                    f" (SELECT count(*) FROM {self.effects})").fetchone()
                self.samples.append((time.monotonic(), published, effects))
                time.sleep(0.1)

    def now(self) -> tuple[int, int]:
        return self.samples[-1][1:] if self.samples else (0, 0)

    def longest_stall(self, column: int, since: float, until: float) -> float:
        """Longest time in [since, until] during which the column did not grow, seconds."""
        window = [s for s in self.samples if since <= s[0] <= until]
        longest, last_change = 0.0, since
        for prev, cur in zip(window, window[1:]):
            if cur[column] > prev[column]:
                longest = max(longest, cur[0] - last_change)
                last_change = cur[0]
        return max(longest, (window[-1][0] - last_change) if window else 0.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


@dataclass
class Flow:
    """Outbox -> relay -> cluster -> consumer runtime -> effects, with its load and progress."""

    cluster: Cluster
    dsn: str
    topic: str
    load: LoadWriter
    relay: RelayThread
    consumer: Any
    consumer_thread: Any
    consumer_stop: threading.Event
    progress: Progress
    projection: EffectsProjection
    pool: ConnectionPool

    def finish(self) -> dict[str, Any]:
        """Stop the load, wait until everything is published and applied, check the
        invariants: every event published and applied exactly once, per aggregate in order."""
        total = self.load.close()
        wait_for(lambda: self.progress.now()[0] >= total, 120, "every outbox row published")
        wait_for(lambda: self.progress.now()[1] >= total, 120, "every event applied")
        time.sleep(1.0)  # a doubled effect would land now
        with psycopg.connect(self.dsn) as conn:
            statuses = dict(conn.execute("SELECT status, count(*) FROM outbox GROUP BY status").fetchall())
            rows = self.projection.rows(conn)
        assert statuses == {"published": total}, statuses
        applied = Counter(event_id for event_id, _, _ in rows)
        written = {eid for ids in self.load.written.values() for eid in ids}
        assert set(applied) == written, f"{len(written - set(applied))} events lost"
        doubled = [eid for eid, n in applied.items() if n > 1]
        assert not doubled, f"{len(doubled)} effects doubled"
        per_aggregate: dict[str, list[int]] = defaultdict(list)
        for _, agg, version in rows:
            per_aggregate[agg].append(version)
        for agg, versions in per_aggregate.items():
            assert versions == list(range(1, len(self.load.written[agg]) + 1)), f"{agg} out of order"
        records = read_topics(self.cluster.bootstrap, [self.topic], expected=total, timeout_s=60)
        topic_stats = check_order(records, {(self.topic, a): ids for a, ids in self.load.written.items()},
                                  allow_duplicates=True)
        return {"events": total, "aggregates": len(per_aggregate), **topic_stats}

    def close(self) -> None:
        self.load.stop.set()
        self.consumer_stop.set()
        self.consumer_thread.join(30)
        self.relay.close()
        self.progress.close()
        self.pool.close()


@pytest.fixture
def flow(cluster: Cluster, dsn: str) -> Iterator[Flow]:  # noqa: F811 - fixture
    cluster.all_up()
    agg_type = f"c{uuid.uuid4().hex[:8]}"
    prefix = "cluster.outbox.event."
    topic = prefix + agg_type
    create_topics(cluster.bootstrap, [topic], partitions=6, replication=3,
                  config={"min.insync.replicas": "2"})
    projection = EffectsProjection(f"effects_{agg_type}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(projection.ddl())
    pool = ConnectionPool(dsn, min_size=1, max_size=4, open=True)
    registry = projection.register(HandlerRegistry())
    from casestream.consumer.settings import ConsumerSettings

    consumer = ConsumerRuntime(f"cluster-{agg_type}", [topic], registry, FramedJsonCodec(), pool,
                               {"bootstrap.servers": cluster.bootstrap, "session.timeout.ms": 6000,
                                "heartbeat.interval.ms": 2000},
                               ConsumerSettings(batch_size=200, poll_timeout_s=0.1))
    consumer_thread, consumer_stop = run_in_thread(consumer)
    assert consumer.ready.wait(60), "consumer got no assignment"
    relay = RelayThread(OutboxRelay(dsn, producer_config(cluster.bootstrap, client_id="cluster.relay"),
                                    settings(prefix, batch_size=200), "cluster"))
    load = LoadWriter(dsn, per_txn=5, aggregates=40, prefix="a", seed=7, pause_s=0.05,
                      make=lambda agg, v: case_returned(agg, v, aggregate_type=agg_type),
                      codec=FramedJsonCodec())
    f = Flow(cluster=cluster, dsn=dsn, topic=topic, load=load, relay=relay,
             consumer=consumer, consumer_thread=consumer_thread, consumer_stop=consumer_stop,
             progress=Progress(dsn, projection.table), projection=projection, pool=pool)
    try:
        yield f
    finally:
        f.close()


def test_killing_the_broker_leading_most_partitions_loses_and_doubles_nothing(flow: Flow) -> None:
    wait_for(lambda: flow.progress.now()[1] > 200, 60, "events flowing before the kill")
    victim = flow.cluster.leaders(flow.topic).most_common(1)[0][0]
    killed_at = time.monotonic()
    flow.cluster.kill(victim)
    applied_at_kill = flow.progress.now()[1]
    # down until leadership has moved to the in-sync followers and the load has gone on
    wait_for(lambda: victim not in flow.cluster.leaders(flow.topic), 60, "leaders moved off the victim",
             step=0.5)
    wait_for(lambda: flow.progress.now()[1] > applied_at_kill + 200, 60, "events applied without the victim")
    down_s = time.monotonic() - killed_at
    flow.cluster.start(victim)
    back_at = time.monotonic()
    time.sleep(3.0)
    stats = flow.finish()
    produce_stall = flow.progress.longest_stall(1, killed_at, back_at)
    consume_stall = flow.progress.longest_stall(2, killed_at, back_at)
    print(f"cluster: SIGKILL of broker {victim} (most leaders), down {down_s:.1f} s: {stats}; longest "
          f"stall until it answered again: relay publishing {produce_stall:.1f} s, consumer applying {consume_stall:.1f} s")
    assert flow.relay.relay.metrics.order_breaches_total == 0


def test_two_brokers_down_writes_stop_safely_and_resume_when_one_returns(flow: Flow) -> None:
    wait_for(lambda: flow.progress.now()[1] > 200, 60, "events flowing before the outage")
    leaders = flow.cluster.leaders(flow.topic)
    down = [n for n, _ in leaders.most_common(2)] if len(leaders) >= 2 else [1, 2]
    for node in down:
        flow.cluster.kill(node)
    time.sleep(3.0)  # what was in flight settles
    published_before = flow.progress.now()[0]
    with psycopg.connect(flow.dsn) as conn:
        pending_before = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0]
    time.sleep(6.0)
    published_during = flow.progress.now()[0] - published_before
    with psycopg.connect(flow.dsn) as conn:
        pending, failed = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'failed')"
            " FROM outbox").fetchone()
    # one broker of three cannot satisfy min.insync.replicas=2 (nor hold the KRaft quorum):
    # nothing is acknowledged, so nothing is marked published; the outbox keeps accepting rows
    assert published_during == 0, f"{published_during} rows published with one broker of three"
    assert pending > pending_before > 0 and failed == 0
    assert flow.relay.thread.is_alive() and flow.load.thread.is_alive()
    resumed_from = time.monotonic()
    flow.cluster.start(down[0])
    wait_for(lambda: flow.progress.now()[0] > published_before, 90, "publishing resumed with two brokers")
    resume_s = time.monotonic() - resumed_from
    stats = flow.finish()  # with two brokers of three: min.insync.replicas=2 is met
    print(f"cluster: brokers {down} down: {pending} rows held pending, 0 published; publishing resumed "
          f"{resume_s:.1f} s after broker {down[0]} was started; {stats}")
