"""Shared fixtures and checks of the relay integration tests (imported by test_relay*.py; no tests here)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from casestream.outbox.writer import OutboxWriter
from casestream.outbox.relay import OutboxRelay, RelaySettings
from casestream.testing.relay import (
    FakeEnvelope, JsonCodec, Record, create_topics, delete_topics, isolated_schema,
)


def test_database(pg_url: str) -> str:
    """``pg_url`` (server URL from tests/conftest.py) + ``/casestream_test``."""
    parts = urlsplit(pg_url)
    path = parts.path if parts.path not in ("", "/") else "/casestream_test"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


test_database.__test__ = False  # type: ignore[attr-defined]


@pytest.fixture
def base_dsn(pg_url: str) -> str:
    return test_database(pg_url)


@pytest.fixture
def bootstrap(kafka_bootstrap: str) -> str:
    return kafka_bootstrap


@pytest.fixture
def dsn(base_dsn: str) -> Iterator[str]:
    with isolated_schema(base_dsn) as scoped:
        yield scoped


@pytest.fixture
def topic_prefix(bootstrap: str) -> Iterator[str]:
    """A unique prefix; topics ``<prefix>case`` and ``<prefix>saga`` (6 partitions) exist."""
    prefix = f"rt{uuid.uuid4().hex[:10]}.outbox.event."
    topics = [prefix + "case", prefix + "saga"]
    create_topics(bootstrap, topics, partitions=6)
    yield prefix
    delete_topics(bootstrap, topics)


def env(agg: str, version: int, *, agg_type: str = "case", size: int = 300) -> FakeEnvelope:
    return FakeEnvelope(aggregate_type=agg_type, aggregate_id=agg, aggregate_version=version,
                        payload_size=size)


def write(dsn: str, envs: list[FakeEnvelope], *, max_message_bytes: int | None = None) -> None:
    """Append ``envs`` in one transaction; ``max_message_bytes`` is the writer's row limit
    (default: the writer's own)."""
    writer = (OutboxWriter(JsonCodec()) if max_message_bytes is None
              else OutboxWriter(JsonCodec(), max_message_bytes=max_message_bytes))
    with psycopg.connect(dsn) as conn, conn.transaction():
        writer.append(conn, envs)


def settings(prefix: str, **kw) -> RelaySettings:
    base = dict(topic_prefix=prefix, lease_s=3.0, poll_interval_s=0.2, metrics_interval_s=0.5)
    base.update(kw)
    return RelaySettings(**base)


def run_until_idle(relay: OutboxRelay, *, max_rounds: int = 200) -> int:
    """run_once until a round publishes nothing; return the total published."""
    total = 0
    for _ in range(max_rounds):
        n = relay.run_once()
        total += n
        if n == 0:
            return total
    raise AssertionError("relay never became idle")


def count_status(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM outbox GROUP BY status").fetchall())


def wait_for(cond, timeout_s: float, what: str, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class RelayThread:
    """An OutboxRelay running ``run(stop)`` in a thread."""

    def __init__(self, relay: OutboxRelay) -> None:
        self.relay = relay
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=relay.name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.relay.run(self.stop)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def close(self, timeout_s: float = 30.0) -> None:
        self.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"{self.relay.name} did not stop"
        assert self.error is None, f"{self.relay.name} crashed: {self.error!r}"


class LoadWriter:
    """Appends events in transactions of ``per_txn`` over ``aggregates`` aggregates
    (ids ``<prefix><n>``, drawn with ``seed``), pausing ``pause_s`` between transactions,
    until closed. ``make(aggregate, version)`` builds each event (default :func:`env`),
    encoded by ``codec`` (default ``JsonCodec``)."""

    def __init__(self, dsn: str, *, per_txn: int, aggregates: int, prefix: str, seed: int,
                 pause_s: float, make=None, codec=None) -> None:
        self.dsn, self.per_txn, self.aggregates = dsn, per_txn, aggregates
        self.prefix, self.seed, self.pause_s = prefix, seed, pause_s
        self.make = make or env
        self.codec = codec or JsonCodec()
        self.written: dict[str, list[str]] = defaultdict(list)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(self.seed)
        writer = OutboxWriter(self.codec)
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stop.is_set():
                    envs = []
                    for _ in range(self.per_txn):
                        agg = f"{self.prefix}{rng.randrange(self.aggregates)}"
                        envs.append(self.make(agg, len(self.written[agg]) + 1))
                        self.written[agg].append(envs[-1].event_id)
                    with conn.transaction():
                        writer.append(conn, envs)
                    time.sleep(self.pause_s)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def close(self) -> int:
        """Stop, assert the writer did not fail, and return how many events it wrote."""
        self.stop.set()
        self.thread.join(10)
        assert self.error is None, repr(self.error)
        return sum(map(len, self.written.values()))


def check_order(records: list[Record], expected: dict[tuple[str, str], list[str]],
                *, allow_duplicates: bool) -> dict[str, int]:
    """Assert every expected event is on the topic, per key in version order.

    ``expected`` maps (topic, key) to event ids in aggregate-version order. Per key, the
    sequence of *first occurrences* (by offset) must equal it, all records of a key must be
    in one partition, and duplicates must repeat an existing id (same bytes). Returns
    ``{"records": n, "duplicates": d}``.
    """
    by_key: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        by_key[(r.topic, r.key)].append(r)
    dups = 0
    assert set(by_key) == set(expected), "keys on the topic differ from the keys written"
    for k, ids in expected.items():
        recs = sorted(by_key[k], key=lambda r: r.offset)
        assert len({r.partition for r in recs}) == 1, f"{k} spread over partitions"
        seen: dict[str, bytes] = {}
        first: list[str] = []
        for r in recs:
            eid = r.headers["id"].decode()
            if eid in seen:
                dups += 1
                assert seen[eid] == r.value, "a duplicate differs from the original"
                continue
            seen[eid] = r.value
            first.append(eid)
        assert first == ids, f"{k}: order/completeness broken"
    if not allow_duplicates:
        assert dups == 0, f"{dups} duplicate records"
    return {"records": len(records), "duplicates": dups}
