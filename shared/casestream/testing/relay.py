"""Test support for the outbox and relay: isolated schemas and topics, a stand-in codec,
a topic reader, and a private Kafka broker that a test may stop and start.

Used by ``tests/integration/test_outbox*.py``, ``test_relay*.py`` and ``bench/relay.py``;
nothing here is imported by production code. Every helper talks to real servers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from casestream.migrations import apply_migrations
from casestream.kafka.config import KafkaTarget, client_config
from casestream.outbox.writer import OUTBOX_MIGRATIONS

__all__ = [
    "FakeEnvelope", "JsonCodec", "Record", "isolated_schema", "create_topics", "delete_topics",
    "read_topics", "PrivateKafka", "dsn_with_search_path", "free_port", "drop_cdc_database",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeEnvelope:
    """The envelope attributes :class:`casestream.outbox.writer.OutboxWriter` reads."""

    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    event_type: str = "TestHappened"
    event_version: int = 1
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    tenant_id: str = "t1"
    correlation_id: str = "corr"
    traceparent: str | None = None
    occurred_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    payload_size: int = 0
    committed_ns: int = 0


class JsonCodec:
    """Stand-in for ``EnvelopeCodec``: JSON of id/aggregate/version, padded to ``payload_size``."""

    def encode(self, env: FakeEnvelope) -> bytes:
        body = json.dumps({"id": str(env.event_id), "agg": env.aggregate_id,
                           "v": env.aggregate_version}).encode()
        pad = max(0, env.payload_size - len(body))
        return body + b" " * pad

    @staticmethod
    def decode(value: bytes) -> dict[str, Any]:
        return json.loads(value)


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed Kafka record."""

    topic: str
    partition: int
    offset: int
    key: str
    headers: dict[str, bytes]
    value: bytes
    timestamp_ms: int


def dsn_with_search_path(dsn: str, schema: str) -> str:
    """Return ``dsn`` with ``options=-csearch_path=<schema>`` so every table is in ``schema``."""
    parts = urlsplit(dsn)
    q = parts.query + ("&" if parts.query else "") + "options=" + quote(f"-csearch_path={schema}")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, q, parts.fragment))


@contextmanager
def isolated_schema(dsn: str, *, prefix: str = "relay_t", migrate: bool = True) -> Iterator[str]:
    """Create a uniquely named schema (outbox migrated into it); yield a DSN bound to it; drop it."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    scoped = dsn_with_search_path(dsn, schema)
    try:
        if migrate:
            apply_migrations(scoped, list(OUTBOX_MIGRATIONS))
        yield scoped
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Terminate leftovers (a killed relay subprocess's sessions are already gone).
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def create_topics(bootstrap: KafkaTarget, topics: Iterable[str], partitions: int = 6,
                  config: dict[str, str] | None = None, timeout_s: float = 30.0,
                  replication: int = 1) -> None:
    """Create ``topics`` (ignore "already exists") and wait until each has leaders."""
    admin = AdminClient(client_config(bootstrap))
    names = list(topics)
    futures = admin.create_topics([NewTopic(t, partitions, replication, config=config or {})
                                   for t in names])
    for t, f in futures.items():
        try:
            f.result(timeout_s)
        except Exception as e:  # noqa: BLE001
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if all(t in md.topics and len(md.topics[t].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in names):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topics {names} not ready")


def delete_topics(bootstrap: KafkaTarget, topics: Iterable[str]) -> None:
    """Delete ``topics``, best effort (test clean-up)."""
    admin = AdminClient(client_config(bootstrap))
    for f in admin.delete_topics(list(topics), operation_timeout=10).values():
        try:
            f.result(15)
        except Exception:  # noqa: BLE001
            pass


def read_topics(bootstrap: KafkaTarget, topics: Sequence[str], *, expected: int, timeout_s: float = 60.0,
                settle_s: float = 1.0) -> list[Record]:
    """Read every partition of ``topics`` from the beginning.

    Returns once ``expected`` records were read and nothing more arrived for ``settle_s``
    seconds (so duplicates beyond ``expected`` are seen too), or at ``timeout_s``.
    """
    consumer = Consumer({**client_config(bootstrap), "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    try:
        md = consumer.list_topics(timeout=10)
        assignment = [TopicPartition(t, p, 0) for t in topics for p in md.topics[t].partitions]
        consumer.assign(assignment)
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.2)
            for m in batch:
                if m.error():
                    continue
                out.append(Record(m.topic(), m.partition(), m.offset(), m.key().decode(),
                                  dict(m.headers() or []), m.value(), m.timestamp()[1]))
            if batch:
                last_new = time.monotonic()
            elif len(out) >= expected and time.monotonic() - last_new >= settle_s:
                break
        return out
    finally:
        consumer.close()


def drop_cdc_database(pg_url: str, database: str, slot: str, *, timeout_s: float = 30.0) -> None:
    """Drop ``database`` and its replication slot ``slot`` (once its walsender let go of it,
    at most ``timeout_s`` after the connector was deleted); ``pg_url`` is the server's URL."""
    with psycopg.connect(pg_url.rstrip("/") + "/postgres", autocommit=True) as conn:
        deadline = time.monotonic() + timeout_s
        while conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active",
                           (slot,)).fetchone() and time.monotonic() < deadline:
            time.sleep(0.2)
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = %s", (slot,))
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


#: where :func:`free_port` looks: below the ephemeral range (32768+, the kernel's for outgoing
#: connections) and off the local infrastructure's and the suite's fixed ports
FREE_PORTS = range(20000, 28000)


def free_port() -> int:
    """A TCP port on 127.0.0.1 in :data:`FREE_PORTS` that is free right now.

    Raises:
        OSError: none of 200 random picks was free.
    """
    import random

    for _ in range(200):
        port = random.randrange(FREE_PORTS.start, FREE_PORTS.stop)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {FREE_PORTS.start}-{FREE_PORTS.stop - 1}")


_SERVER_PROPERTIES = """process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
num.partitions=6
"""


class PrivateKafka:
    """A single-node KRaft broker owned by one test, so the test may stop and restart it
    without disturbing the shared broker of ``deploy/infra.sh``.

    Uses the jars resolved by the infra launcher (``.local/kafka/classpath.txt``).

    Args:
        classpath_file: file holding the Java classpath (``mvn dependency:build-classpath``).
        workdir: directory for config, data and logs.
        port, controller: the PLAINTEXT and controller ports (default: free ports).
        advertised: ``host:port`` the PLAINTEXT listener advertises in metadata (default its
            own address): a TCP proxy in front of the broker carries the clients' traffic only
            when the broker advertises the proxy.
        direct_port: a second listener, ``DIRECT``, advertising itself; ``direct`` is its
            address (the PLAINTEXT one without it) — for a test's own clients beside a proxy.
    """

    def __init__(self, classpath_file: Path, workdir: Path, *, port: int | None = None,
                 controller: int | None = None, advertised: str | None = None,
                 direct_port: int | None = None) -> None:
        self.classpath = classpath_file.read_text().strip()
        self.workdir = workdir
        self.port = port or free_port()
        self.controller = controller or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.direct = f"127.0.0.1:{direct_port}" if direct_port else self.bootstrap
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "server.properties"
        conf = _SERVER_PROPERTIES.format(port=self.port, controller=self.controller,
                                         data=workdir / "data")
        if advertised:
            conf = conf.replace(f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                                f"advertised.listeners=PLAINTEXT://{advertised}")
        if direct_port:
            conf = (conf.replace("CONTROLLER://127.0.0.1:", f"DIRECT://{self.direct},CONTROLLER://127.0.0.1:", 1)
                    .replace("advertised.listeners=PLAINTEXT://", f"advertised.listeners=DIRECT://{self.direct},PLAINTEXT://")
                    .replace("CONTROLLER:PLAINTEXT,", "CONTROLLER:PLAINTEXT,DIRECT:PLAINTEXT,"))
        self.conf.write_text(conf)
        cluster_id = "cs" + uuid.uuid4().hex[:20]
        self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.conf),
                   "--ignore-formatted", wait=True)

    def _java(self, *args: str, wait: bool = False) -> subprocess.Popen[bytes]:
        cmd = ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dkafka.logs.dir={self.workdir / 'logs'}",
               "-Dlog4j2.level=WARN", "-cp", self.classpath, *args]
        with open(self.workdir / "kafka.out", "ab") as log:  # the child keeps its own copy
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            if p.wait(120) != 0:
                raise RuntimeError(f"{args[0]} failed, see {self.workdir / 'kafka.out'}")
        return p

    def start(self, timeout_s: float = 90.0) -> None:
        """Start the broker and wait until it answers a metadata request."""
        self.proc = self._java("kafka.Kafka", str(self.conf))
        admin = AdminClient(client_config(self.direct))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"private kafka exited, see {self.workdir / 'kafka.out'}")
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.5)
        raise TimeoutError("private kafka did not become ready")

    def kill(self) -> None:
        """SIGKILL the broker (its process group) and wait for it: an abrupt outage."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def close(self) -> None:
        """Stop the broker if running (SIGTERM, then SIGKILL after 20 s)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
