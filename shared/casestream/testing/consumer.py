"""Test support for the consumer runtime: a framed test codec, an effects projection, Kafka helpers,
and a subprocess entry point used by the crash tests.

Not used by services. Integration tests run the real ``casestream.events.codec.EnvelopeCodec`` (Avro,
Confluent wire format, upcasters) via :func:`real_codec` — over the real schema registry, or over
an ``InMemoryRegistry`` when the shared registry refuses the catalog. ``FramedJsonCodec`` (JSON in
the same 5-byte frame, same poison reasons) is a dependency-free stand-in for unit-level use.

Subprocess entry point (crash tests)::

    python -m casestream.testing.consumer --name N --topic T --dsn DSN --bootstrap B \
        --table effects_x [--codec registry|memory|test] [--kill-before-offset-commit]
        [--kill-in-handler-at SEQ] [--expect N] [--idle-exit S]
        [--fail-always EVENT_ID --retry-delay-s S --max-attempts N]
        [--key-concurrency C --handler-wait-ms MS [--async-handler]]
"""

from __future__ import annotations

import argparse
import asyncio
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

from casestream.errors import CasestreamError, PoisonMessageError, RetryableError
from casestream.handlers.registry import HandlerContext, HandlerKind, HandlerRegistry

from casestream.events.envelope import Envelope
from casestream.kafka.config import KafkaTarget, client_config

TEST_SCHEMA_ID = 1


def make_event(aggregate_id: str, version: int, *, event_type: str,
               aggregate_type: str = "case", event_id: str | None = None,
               payload: dict[str, Any] | None = None, seq: int | None = None) -> Envelope:
    """An Envelope of ``event_type`` v1 for tests; ``payload`` default ``{"reason": ...}`` naming
    the aggregate and version (or ``seq``). No default type: the type must be one of the
    catalog the test's codec uses."""
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
    """The contract headers of ``env``: id, type, event_version, traceparent, correlation_id."""
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


def database_dsn(pg_url: str, database: str = "casestream_test") -> str:
    """``pg_url`` with ``database`` as its database unless it already names one."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(pg_url)
    if parts.path.strip("/"):
        return pg_url
    return urlunsplit(parts._replace(path=f"/{database}"))


# ---------------------------------------------------------------- Kafka helpers

def create_topic(bootstrap: KafkaTarget, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with ``partitions`` (idempotent)."""
    # lazy (start-up cost): drivers load only in the helpers that use them
    from casestream.consumer.runtime import ensure_topics

    ensure_topics(bootstrap, [topic], partitions=partitions)


def produce(bootstrap: KafkaTarget, topic: str, messages: Sequence[tuple[bytes | None, bytes | None,
                                                                 Sequence[tuple[str, bytes]]]],
            *, partition: int | None = None) -> None:
    """Produce (key, value, headers) messages in order and wait for every delivery."""
    # lazy (start-up cost): drivers load only in the helpers that use them
    from confluent_kafka import Producer

    p = Producer({**client_config(bootstrap), "acks": "all", "enable.idempotence": True,
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


def produce_events(bootstrap: KafkaTarget, topic: str, codec: Any, events: Sequence[Envelope], *,
                   partition: int | None = None) -> None:
    """Encode and produce ``events`` keyed by aggregate id."""
    produce(bootstrap, topic, [(e.aggregate_id.encode(), codec.encode(e), headers_of(e))
                               for e in events], partition=partition)


def committed(bootstrap: KafkaTarget, group: str, topic: str, partitions: int = 1) -> dict[int, int]:
    """Committed offsets of ``group`` on ``topic`` (partition -> offset; -1001 = none)."""
    # lazy (start-up cost): drivers load only in the helpers that use them
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**client_config(bootstrap), "group.id": group,
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


# ---------------------------------------------------------------- in-process harness

@dataclass
class Harness:
    """One integration test's world: topic, consumer name, effects table, pool, codec, runtimes.

    Build it with :meth:`create`, close it with :meth:`close` (stops runtimes, drops the table).
    """

    bootstrap: KafkaTarget
    dsn: str
    topic: str
    name: str
    pool: Any
    projection: EffectsProjection
    codec: Any = field(default_factory=FramedJsonCodec)
    registry_url: str | None = None
    runtimes: list[tuple[Any, Any, Any]] = field(default_factory=list)

    @classmethod
    def create(cls, bootstrap: KafkaTarget, pg_url: str, *, codec: Any = None,
               registry_url: str | None = None, prefix: str = "test.consumer") -> "Harness":
        # lazy (start-up cost): drivers load only in the helpers that use them
        import psycopg
        from psycopg_pool import ConnectionPool

        suffix = uuid.uuid4().hex[:10]
        dsn = database_dsn(pg_url)
        projection = EffectsProjection(f"effects_{suffix}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(projection.ddl())
        pool = ConnectionPool(dsn, min_size=1, max_size=4, open=True, kwargs={"prepare_threshold": None})
        return cls(bootstrap=bootstrap, dsn=dsn, topic=f"{prefix}.{suffix}",
                   name=f"{prefix}-{suffix}", pool=pool, projection=projection,
                   codec=codec or FramedJsonCodec(), registry_url=registry_url)

    @property
    def codec_args(self) -> list[str]:
        """Command-line flags giving a child process the same codec as this harness."""
        kind = getattr(self.codec, "registry_kind", None)
        if kind == "registry":
            return ["--codec", "registry", "--registry-url", str(self.registry_url)]
        if kind == "memory":
            return ["--codec", "memory"]
        return ["--codec", "test"]

    def close(self) -> None:
        # lazy (start-up cost): drivers load only in the helpers that use them
        import psycopg

        # lazy (start-up cost): drivers load only in the helpers that use them
        from casestream.testing.relay import delete_topics

        for _rt, thread, stop in self.runtimes:
            stop.set()
            thread.join(30)
        self.pool.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.projection.table}")
            for table in ("consumer_inbox", "consumer_version_guard", "consumer_held_event",
                          "consumer_retry"):
                conn.execute(f"DELETE FROM {table} WHERE consumer = %s", (self.name,))
        delete_topics(self.bootstrap, (self.topic, f"{self.name}.dlq", f"{self.name}.redrive"))

    def settings(self, **kw: Any) -> Any:
        # lazy (start-up cost): drivers load only in the helpers that use them
        from casestream.consumer.settings import ConsumerSettings
        from casestream.retry import RetryPolicy

        base: dict[str, Any] = dict(batch_size=100, poll_timeout_s=0.1, sweep_interval_s=0.2,
                                    retry=RetryPolicy(max_attempts=5, initial_delay_s=0.05,
                                                      max_delay_s=0.2, jitter=0.2))
        base.update(kw)
        return ConsumerSettings(**base)

    def runtime(self, settings: Any = None, registry: HandlerRegistry | None = None) -> Any:
        # lazy (start-up cost): drivers load only in the helpers that use them
        from casestream.consumer.runtime import ConsumerRuntime

        registry = registry or self.projection.register(HandlerRegistry())
        return ConsumerRuntime(self.name, [self.topic], registry, self.codec, self.pool,
                               client_config(self.bootstrap), settings or self.settings())

    def start(self, runtime: Any) -> Any:
        thread, stop = run_in_thread(runtime)
        self.runtimes.append((runtime, thread, stop))
        if not runtime.ready.wait(30):
            raise AssertionError("no partition assignment within 30 s")
        return runtime

    def stop(self, runtime: Any) -> None:
        for rt, thread, stop in self.runtimes:
            if rt is runtime:
                stop.set()
                thread.join(30)
                assert not thread.is_alive(), "runtime did not stop within 30 s"
                assert not thread.errors, thread.errors  # type: ignore[attr-defined]

    def rows(self) -> list[tuple[str, str, int]]:
        # lazy (start-up cost): drivers load only in the helpers that use them
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            return self.projection.rows(conn)

    def versions(self, aggregate_id: str) -> list[int]:
        return [r[2] for r in self.rows() if r[1] == aggregate_id]

    def one_effect_each(self, event_ids: Iterable[str]) -> None:
        got = sorted(r[0] for r in self.rows())
        want = sorted(event_ids)
        assert got == want, f"{len(got)} effects for {len(want)} events"

    def dead_letters(self, count: int, timeout_s: float = 20.0) -> list[Any]:
        # lazy (start-up cost): drivers load only in the helpers that use them
        from casestream.consumer.deadletters import read_topic

        def enough() -> list[Any] | None:
            try:
                recs = read_topic(self.bootstrap, f"{self.name}.dlq", timeout_s=5)
            except Exception:  # noqa: BLE001 - topic may not exist yet
                return None
            return recs if len(recs) >= count else None

        return wait_until(enough, timeout_s, 0.3)

    def guard(self, aggregate_id: str) -> tuple[str, int] | None:
        # lazy (start-up cost): drivers load only in the helpers that use them
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT state, last_version FROM consumer_version_guard WHERE consumer = %s"
                " AND aggregate_id = %s", (self.name, aggregate_id)).fetchone()
        return (row[0], row[1]) if row else None


# ---------------------------------------------------------------- subprocess entry point

def main(argv: Sequence[str] | None = None) -> int:
    """Run one consumer on ``--topic`` into ``--table`` until idle for ``--idle-exit`` seconds."""
    import logging

    # lazy (start-up cost): drivers load only in the helpers that use them
    from psycopg_pool import ConnectionPool

    # lazy (start-up cost): drivers load only in the helpers that use them
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
    ap.add_argument("--idle-exit", type=float, default=0.0,
                    help="stop after this many idle seconds once partitions are assigned")
    ap.add_argument("--expect", type=int, default=0,
                    help="stop once this many events were seen (applied + duplicate + stale)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--codec", choices=["test", "registry", "memory"], default="test",
                    help="test: FramedJsonCodec; registry/memory: EnvelopeCodec over the real"
                         " registry (--registry-url) or an in-memory one")
    ap.add_argument("--registry-url")
    ap.add_argument("--fail-always", action="append", default=[], metavar="EVENT_ID",
                    help="the handler raises RetryableError for this event every time and logs"
                         " each call to stderr as 'CALL <event id> <epoch s>'")
    ap.add_argument("--retry-delay-s", type=float,
                    help="constant retry backoff, seconds, no jitter (default: the consumer's)")
    ap.add_argument("--max-attempts", type=int, default=5,
                    help="attempts of a failing message before its dead letter (with --retry-delay-s)")
    ap.add_argument("--key-concurrency", type=int, default=1,
                    help="ConsumerSettings.key_concurrency (events of different aggregates at once)")
    ap.add_argument("--handler-wait-ms", type=float, default=0.0,
                    help="the handler sleeps this long per event first (an external call)")
    ap.add_argument("--async-handler", action="store_true",
                    help="the handler is a coroutine: it awaits asyncio.sleep instead")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s child {args.name} %(levelname)s %(message)s")

    codec: Any = (FramedJsonCodec() if args.codec == "test" else
                  real_codec(args.registry_url if args.codec == "registry" else None,
                             fallback=args.codec == "memory"))
    projection = EffectsProjection(args.table, kill_at_seq=args.kill_in_handler_at,
                                   fail={eid: 10**9 for eid in args.fail_always})
    registry = HandlerRegistry()
    watched = set(args.fail_always)

    def handle(ctx: HandlerContext, event: Any) -> None:
        if event.event_id in watched:
            print(f"CALL {event.event_id} {time.time():.6f}", file=sys.stderr, flush=True)
        if args.handler_wait_ms:
            time.sleep(args.handler_wait_ms / 1000.0)
        projection.handle(ctx, event)

    async def handle_async(ctx: HandlerContext, event: Any) -> None:
        await asyncio.sleep(args.handler_wait_ms / 1000.0)
        projection.handle(ctx, event)

    registry.add("CaseReturned", handle_async if args.async_handler else handle,
                 kind=HandlerKind.PROJECTION)
    settings = ConsumerSettings(batch_size=args.batch_size, key_concurrency=args.key_concurrency)
    if args.retry_delay_s is not None:
        # lazy (start-up cost): drivers load only in the helpers that use them
        from casestream.retry import RetryPolicy

        settings = ConsumerSettings(batch_size=args.batch_size,
                                    key_concurrency=args.key_concurrency, retry=RetryPolicy(
            initial_delay_s=args.retry_delay_s, max_delay_s=args.retry_delay_s, multiplier=1.0,
            jitter=0.0, max_attempts=args.max_attempts))
    pool = ConnectionPool(args.dsn, min_size=1, max_size=args.key_concurrency + 1, open=True)
    runtime = ConsumerRuntime(args.name, [args.topic], registry, codec, pool,
                              {"bootstrap.servers": args.bootstrap,
                               "session.timeout.ms": args.session_timeout_ms,
                               "heartbeat.interval.ms": max(500, args.session_timeout_ms // 6)},
                              settings)
    if args.kill_before_offset_commit:
        original = runtime._commit_pending

        def commit_then_die(*, wait: bool = False) -> None:
            if runtime._pending:
                print("KILLING before offset commit", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            original(wait=wait)

        runtime._commit_pending = commit_then_die  # type: ignore[method-assign]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.idle_exit or args.expect:
        def watchdog() -> None:
            runtime.ready.wait()
            last, since = -1, time.monotonic()
            while not stop.is_set():
                time.sleep(0.2)
                n = runtime.stats.applied + runtime.stats.duplicates + runtime.stats.stale
                if args.expect and n >= args.expect:
                    stop.set()
                elif n != last:
                    last, since = n, time.monotonic()
                elif args.idle_exit and time.monotonic() - since > args.idle_exit:
                    stop.set()

        threading.Thread(target=watchdog, daemon=True).start()
    runtime.run(stop)
    pool.close()
    print(json.dumps({"applied": runtime.stats.applied, "duplicates": runtime.stats.duplicates,
                      "stale": runtime.stats.stale}), flush=True)
    return 0


def close_codec(codec: Any) -> None:
    """Close the registry client of a codec built by :func:`real_codec` (if it has one)."""
    close = getattr(getattr(codec, "registry", None), "close", None)
    if close is not None:
        close()


def memory_codec(catalog: Any = None, registry: Any = None) -> Any:
    """The one test codec: :func:`casestream.events.open_codec` over ``catalog`` (None: the
    catalog of :func:`casestream.service.discovery.catalog_folders`) and ``registry`` (None:
    a fresh ``InMemoryRegistry``), prepared with auto-registration."""
    # lazy (start-up cost): drivers load only in the helpers that use them
    from casestream.events.catalog import load_catalog
    from casestream.events.codec import open_codec
    from casestream.events.registry import InMemoryRegistry
    from casestream.service.discovery import catalog_folders

    if catalog is None:
        catalog = load_catalog(*catalog_folders())
    return open_codec(catalog, registry if registry is not None else InMemoryRegistry(),
                      auto_register=True)


def real_codec(registry_url: str | None, *, fallback: bool = False) -> Any:
    """The real ``EnvelopeCodec`` (catalog, upcasters) over the registry at ``registry_url``.

    With ``fallback``, if the registry is unreachable or refuses to register the catalog, the
    same codec is built over an ``InMemoryRegistry`` instead (ids are deterministic — catalog
    order — so separate processes agree on them). ``codec.registry_kind`` says which was used.
    """
    # lazy (start-up cost): drivers load only in the helpers that use them
    from casestream.events.catalog import load_catalog
    from casestream.events.codec import open_codec
    from casestream.service.discovery import catalog_folders

    catalog = load_catalog(*catalog_folders())
    if registry_url:
        try:
            codec = open_codec(catalog, registry_url, auto_register=True)
            codec.registry_kind = "registry"
            return codec
        except CasestreamError:
            if not fallback:
                raise
    elif not fallback:
        raise ValueError("registry_url is required without fallback")
    codec = memory_codec(catalog)
    codec.registry_kind = "memory"
    return codec


if __name__ == "__main__":
    raise SystemExit(main())
