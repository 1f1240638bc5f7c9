"""Test support for the consumer runtime: a framed test codec, an effects projection, Kafka helpers,
and a subprocess entry point used by the crash tests.

Not used by services. ``FramedJsonCodec`` frames JSON like the Confluent wire format (magic byte
0, 4-byte schema id) so poison classes (bad magic byte, unknown schema id, undecodable body,
invalid envelope) behave like the real ``casestream.codec.EnvelopeCodec``; integration tests use
the real codec when the schema registry is reachable and fall back to this one otherwise.

Subprocess entry point (crash tests)::

    python -m casestream.consumer.testing --name N --topic T --dsn DSN --bootstrap B \
        --table effects_x [--kill-before-offset-commit] [--kill-in-handler-at SEQ] [--idle-exit S]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from casestream.errors import PoisonMessageError
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry

try:  # the real envelope once it exists; a look-alike otherwise
    from casestream.envelope import Envelope
except ImportError:  # pragma: no cover - only before casestream.envelope lands

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Envelope:  # type: ignore[no-redef]
        event_id: str
        event_type: str
        event_version: int
        source: str
        tenant_id: str
        aggregate_type: str
        aggregate_id: str
        aggregate_version: int
        occurred_at: datetime
        correlation_id: str
        actor_id: str
        payload: Any = field(default_factory=dict)
        causation_id: str | None = None
        traceparent: str | None = None
        published_at: datetime | None = None

TEST_SCHEMA_ID = 1


def make_event(aggregate_id: str, version: int, *, event_type: str = "CaseReturned",
               aggregate_type: str = "case", event_id: str | None = None,
               payload: dict[str, Any] | None = None, seq: int | None = None) -> Envelope:
    """An Envelope for tests (``CaseReturned`` v1 {reason} by default, valid in the real catalog)."""
    reason = f"seq={seq}" if seq is not None else f"{aggregate_id}@{version}"
    return Envelope(
        event_id=event_id or str(uuid.uuid4()), event_type=event_type, event_version=1,
        source="case", tenant_id="t1", aggregate_type=aggregate_type, aggregate_id=aggregate_id,
        aggregate_version=version, occurred_at=datetime.now(timezone.utc),
        correlation_id=aggregate_id, actor_id="tester",
        payload=payload if payload is not None else {"reason": reason},
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )


class FramedJsonCodec:
    """Test codec: ``0x00 | schema id 1 (4 bytes BE) | JSON envelope``."""

    def encode(self, env: Envelope) -> bytes:
        d = {f.name: getattr(env, f.name) for f in fields(env)}  # type: ignore[arg-type]
        d["occurred_at"] = env.occurred_at.isoformat()
        d.pop("published_at", None)
        return b"\x00" + struct.pack(">I", TEST_SCHEMA_ID) + json.dumps(d).encode()

    def headers(self, env: Envelope) -> list[tuple[str, bytes]]:
        return headers_of(env)

    def decode(self, value: bytes, *, published_at: datetime | None = None) -> Envelope:
        if not value or value[0] != 0:
            raise PoisonMessageError("value does not start with magic byte 0", reason="bad_magic_byte")
        if len(value) < 5:
            raise PoisonMessageError("value shorter than the 5-byte header", reason="too_short")
        sid = struct.unpack(">I", value[1:5])[0]
        if sid != TEST_SCHEMA_ID:
            raise PoisonMessageError(f"unknown schema id {sid}", reason="unknown_schema_id")
        try:
            d = json.loads(value[5:])
            d["occurred_at"] = datetime.fromisoformat(d["occurred_at"])
            return Envelope(**d, published_at=published_at)
        except (ValueError, KeyError, TypeError) as e:
            raise PoisonMessageError(f"invalid envelope: {e}", reason="validation") from e


def headers_of(env: Envelope) -> list[tuple[str, bytes]]:
    """The contract headers of ``env`` (BRIEF: id, type, event_version, traceparent, correlation_id)."""
    h = [("id", env.event_id.encode()), ("type", env.event_type.encode()),
         ("event_version", str(env.event_version or 1).encode()),
         ("correlation_id", env.correlation_id.encode())]
    if env.traceparent:
        h.append(("traceparent", env.traceparent.encode()))
    return h


@dataclass(slots=True)
class EffectsProjection:
    """A projection that inserts one row per handled event into ``table`` — no unique key, so a
    doubled effect shows up as two rows — and counts calls per event id in memory.

    ``fail`` maps event id -> remaining failures to raise (``RetryableError`` by default).
    """

    table: str
    calls: dict[str, int] = field(default_factory=dict)
    fail: dict[str, int] = field(default_factory=dict)
    fail_with: type[BaseException] | None = None
    kill_at_seq: int | None = None

    def ddl(self) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {self.table} (event_id text NOT NULL,"
                f" aggregate_id text NOT NULL, aggregate_version bigint NOT NULL,"
                f" reason text, at timestamptz NOT NULL DEFAULT clock_timestamp())")

    def register(self, registry: HandlerRegistry, event_types: Iterable[str] = ("CaseReturned",),
                 kind: HandlerKind = HandlerKind.PROJECTION) -> HandlerRegistry:
        for t in event_types:
            registry.add(t, self.handle, kind=kind)
        return registry

    def handle(self, ctx: HandlerContext, event: Any) -> None:
        from casestream.errors import RetryableError

        eid = event.event_id
        self.calls[eid] = self.calls.get(eid, 0) + 1
        reason = (event.payload or {}).get("reason") if isinstance(event.payload, dict) else None
        if self.kill_at_seq is not None and reason == f"seq={self.kill_at_seq}":
            os.kill(os.getpid(), signal.SIGKILL)  # inside the open transaction
        left = self.fail.get(eid, 0)
        if left:
            self.fail[eid] = left - 1
            raise (self.fail_with or RetryableError)(f"induced failure for {eid}")
        ctx.conn.execute(
            f"INSERT INTO {self.table} (event_id, aggregate_id, aggregate_version, reason)"
            " VALUES (%s, %s, %s, %s)",
            (eid, event.aggregate_id, event.aggregate_version, reason),
        )

    def rows(self, conn: Any) -> list[tuple[str, str, int]]:
        """(event_id, aggregate_id, aggregate_version) in insertion order."""
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            f"SELECT event_id, aggregate_id, aggregate_version FROM {self.table} ORDER BY at")]


# ---------------------------------------------------------------- Kafka helpers

def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with ``partitions`` (idempotent)."""
    from casestream.consumer.runtime import ensure_topics

    ensure_topics(bootstrap, [topic], partitions=partitions)


def produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes | None, bytes | None,
                                                                 Sequence[tuple[str, bytes]]]],
            *, partition: int | None = None) -> None:
    """Produce (key, value, headers) messages in order and wait for every delivery."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "partitioner": "murmur2_random"})
    errors: list[Any] = []
    for key, value, headers in messages:
        kw: dict[str, Any] = {"key": key, "value": value, "headers": list(headers),
                              "on_delivery": lambda err, msg: errors.append(err) if err else None}
        if partition is not None:
            kw["partition"] = partition
        p.produce(topic, **kw)
        p.poll(0)
    if p.flush(30) or errors:
        raise RuntimeError(f"produce to {topic} failed: {errors[:3]}")


def produce_events(bootstrap: str, topic: str, codec: Any, events: Sequence[Envelope], *,
                   partition: int | None = None) -> None:
    """Encode and produce ``events`` keyed by aggregate id."""
    produce(bootstrap, topic, [(e.aggregate_id.encode(), codec.encode(e), headers_of(e))
                               for e in events], partition=partition)


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> dict[int, int]:
    """Committed offsets of ``group`` on ``topic`` (partition -> offset; -1001 = none)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def run_in_thread(runtime: Any) -> tuple[threading.Thread, threading.Event]:
    """Start ``runtime.run(stop)`` in a daemon thread; returns (thread, stop)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            runtime.run(stop)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            raise

    t = threading.Thread(target=target, name=f"test.{runtime.name}", daemon=True)
    t.errors = errors  # type: ignore[attr-defined]
    t.start()
    return t, stop


def wait_until(predicate: Any, timeout_s: float = 30.0, interval_s: float = 0.1) -> Any:
    """Poll ``predicate()`` until truthy; return its value or raise AssertionError on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


# ---------------------------------------------------------------- subprocess entry point

def main(argv: Sequence[str] | None = None) -> int:
    """Run one consumer on ``--topic`` into ``--table`` until idle for ``--idle-exit`` seconds."""
    import logging

    from psycopg_pool import ConnectionPool

    from casestream.consumer.runtime import ConsumerRuntime
    from casestream.consumer.settings import ConsumerSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--kill-before-offset-commit", action="store_true")
    ap.add_argument("--kill-in-handler-at", type=int)
    ap.add_argument("--idle-exit", type=float, default=0.0)
    ap.add_argument("--codec", choices=["test", "real"], default="test")
    ap.add_argument("--registry-url")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s child {args.name} %(levelname)s %(message)s")

    codec: Any = FramedJsonCodec() if args.codec == "test" else real_codec(args.registry_url)
    projection = EffectsProjection(args.table, kill_at_seq=args.kill_in_handler_at)
    registry = projection.register(HandlerRegistry())
    pool = ConnectionPool(args.dsn, min_size=1, max_size=2, open=True)
    runtime = ConsumerRuntime(args.name, [args.topic], registry, codec, pool,
                              {"bootstrap.servers": args.bootstrap},
                              ConsumerSettings(batch_size=args.batch_size, ensure_topics=False))
    if args.kill_before_offset_commit:
        original = runtime._commit_pending

        def commit_then_die() -> None:
            if runtime._pending:
                print("KILLING before offset commit", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            original()

        runtime._commit_pending = commit_then_die  # type: ignore[method-assign]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.idle_exit:
        def watchdog() -> None:
            last, since = -1, time.monotonic()
            while not stop.is_set():
                time.sleep(0.2)
                n = runtime.stats.applied + runtime.stats.duplicates + runtime.stats.stale
                if n != last:
                    last, since = n, time.monotonic()
                elif time.monotonic() - since > args.idle_exit:
                    stop.set()

        threading.Thread(target=watchdog, daemon=True).start()
    runtime.run(stop)
    pool.close()
    print(json.dumps({"applied": runtime.stats.applied, "duplicates": runtime.stats.duplicates,
                      "stale": runtime.stats.stale}), flush=True)
    return 0


def real_codec(registry_url: str | None) -> Any:
    """The real EnvelopeCodec over the schema catalog and the registry at ``registry_url``."""
    from casestream.catalog import load_catalog
    from casestream.codec import EnvelopeCodec
    from casestream.registry import ConfluentSchemaRegistry
    from casestream.upcasters import default_upcasters

    if not registry_url:
        raise SystemExit("--registry-url is required with --codec real")
    codec = EnvelopeCodec(load_catalog(), ConfluentSchemaRegistry(registry_url), default_upcasters())
    codec.prepare(auto_register=True)
    return codec


if __name__ == "__main__":
    raise SystemExit(main())
