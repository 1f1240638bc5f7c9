"""Key-parallel consumption (``ConsumerSettings.key_concurrency``) on the real Kafka and PostgreSQL.

Within one partition, events of different aggregates are handled at once; each aggregate's
events keep their order, each has exactly one effect (the effects table has no unique key: a
doubled effect shows as two rows), the committed offsets reach the end, a poison message is
dead-lettered and retryable failures are retried — with a member joining mid-flight (rebalance)
and with the consumer process SIGKILLed inside a handler while other units are running; each
with plain handlers (a worker thread per call) and with coroutine handlers (``async def``,
awaited together on a worker's event loop).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.consumer.keyparallel import KEY_QUEUE_HARD, key_queue_limit
from casestream.testing.consumer import (
    Harness,
    committed,
    create_topic,
    produce,
    produce_events,
    wait_until,
)
from tests.support.events import case_returned

PARTITIONS = 2
CONCURRENCY = 8


def _harness(consumer_harness: Any, prefix: str) -> Harness:
    env: Harness = consumer_harness(prefix)
    env.pool.close()
    env.pool = ConnectionPool(env.dsn, min_size=1, max_size=2 * CONCURRENCY + 2, open=True)
    create_topic(env.bootstrap, env.topic, PARTITIONS)
    return env


def _events(aggregates: int, versions: int) -> list[Any]:
    # version-major: every aggregate's v1, then every v2, ... (interleaved in each partition)
    return [case_returned(f"A{a}", v, seq=(v - 1) * aggregates + a)
            for v in range(1, versions + 1) for a in range(aggregates)]


class Concurrency:
    """Handler wrapper: waits ``wait_s`` (an external call) and records the most calls at once."""

    def __init__(self, env: Harness, wait_s: float) -> None:
        self.env, self.wait_s = env, wait_s
        self.now = self.most = 0
        self.lock = threading.Lock()

    def handle(self, ctx: Any, event: Any) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.wait_s)
            self.env.projection.handle(ctx, event)
        finally:
            with self.lock:
                self.now -= 1

    async def handle_async(self, ctx: Any, event: Any) -> None:
        self.now += 1  # one event loop per worker thread: a coroutine probe needs no lock
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self.wait_s)
            self.env.projection.handle(ctx, event)
        finally:
            self.now -= 1

    def registry(self, coroutine: bool = False) -> HandlerRegistry:
        registry = HandlerRegistry()
        registry.add("CaseReturned", self.handle_async if coroutine else self.handle,
                     kind=HandlerKind.PROJECTION)
        return registry


def _in_order_once(env: Harness, events: list[Any]) -> None:
    env.one_effect_each(e.event_id for e in events)
    by_agg: dict[str, list[int]] = {}
    for _eid, agg, version in env.rows():  # insertion (commit-clock) order
        by_agg.setdefault(agg, []).append(version)
    want = {e.aggregate_id for e in events}
    assert set(by_agg) == want
    for agg, versions in by_agg.items():
        assert versions == sorted(versions), f"{agg} applied out of order: {versions}"


def _end_offsets_committed(env: Harness, total: int) -> None:
    def done() -> bool:
        got = committed(env.bootstrap, env.name, env.topic, PARTITIONS)
        return sum(max(o, 0) for o in got.values()) == total

    wait_until(done, 30, 0.3)


@pytest.mark.parametrize("coroutine", [False, True], ids=["threads", "async-def"])
def test_different_aggregates_of_a_partition_run_at_once_in_order_once_each(
        consumer_harness: Any, coroutine: bool) -> None:
    env = _harness(consumer_harness, "test.keypar")
    events = _events(aggregates=40, versions=6)
    env.projection.fail = {events[45].event_id: 2, events[130].event_id: 1}  # retried, cut
    probe = Concurrency(env, 0.01)
    rt = env.runtime(env.settings(key_concurrency=CONCURRENCY, batch_size=50),
                     probe.registry(coroutine))
    env.start(rt)
    produce_events(env.bootstrap, env.topic, env.codec, events)
    produce(env.bootstrap, env.topic, [(b"A0", b"\x00not an envelope", [])])  # poison
    wait_until(lambda: len(env.rows()) >= len(events), 60, 0.2)
    [dead] = env.dead_letters(1)
    assert dead.value == b"\x00not an envelope"
    _end_offsets_committed(env, len(events) + 1)
    env.stop(rt)
    # more handlers at once than partitions: aggregates of one partition ran concurrently
    assert PARTITIONS < probe.most <= CONCURRENCY, probe.most
    _in_order_once(env, events)
    assert env.projection.calls[events[45].event_id] == 3  # two induced failures, then applied
    assert rt.stats.retries >= 3


@pytest.mark.parametrize("coroutine", [False, True], ids=["threads", "async-def"])
def test_a_member_joining_mid_flight_loses_and_doubles_nothing(consumer_harness: Any,
                                                               coroutine: bool) -> None:
    env = _harness(consumer_harness, "test.keypar.rebalance")
    events = _events(aggregates=60, versions=8)
    probe = Concurrency(env, 0.005)
    settings = env.settings(key_concurrency=CONCURRENCY, batch_size=40)
    first = env.runtime(settings, probe.registry(coroutine))
    env.start(first)
    produce_events(env.bootstrap, env.topic, env.codec, events)
    wait_until(lambda: len(env.rows()) >= 60, 60, 0.05)
    second = env.runtime(settings, probe.registry(coroutine))
    env.start(second)  # rebalance while units of the first member are running
    wait_until(lambda: len(env.rows()) >= len(events), 90, 0.2)
    _end_offsets_committed(env, len(events))
    env.stop(first)
    env.stop(second)
    assert first.stats.revocations >= 1
    _in_order_once(env, events)


def test_a_full_key_queue_slows_the_fetch_without_pausing_the_partitions(
        consumer_harness: Any) -> None:
    # A pause purges what librdkafka prefetched and each resume fetches it again: pausing at
    # every fill left the workers without units. The queue stays near its limit instead.
    env = _harness(consumer_harness, "test.keypar.flow")
    events = _events(aggregates=200, versions=8)
    produce_events(env.bootstrap, env.topic, env.codec, events)
    settings = env.settings(key_concurrency=CONCURRENCY, batch_size=50)
    limit = key_queue_limit(settings.batch_size, CONCURRENCY)
    most_queued = 0
    probe = Concurrency(env, 0.003)
    registry = HandlerRegistry()

    def handle(ctx: Any, event: Any) -> None:
        nonlocal most_queued
        most_queued = max(most_queued, rt._workers.queued)  # noqa: SLF001 - the queue's level
        probe.handle(ctx, event)

    registry.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
    rt = env.runtime(settings, registry)
    env.start(rt)
    wait_until(lambda: len(env.rows()) >= len(events), 90, 0.2)
    _end_offsets_committed(env, len(events))
    env.stop(rt)
    assert most_queued >= limit, (most_queued, limit)  # the queue was full ...
    assert rt.stats.flow_pauses == 0  # ... and the partitions kept their prefetched records
    assert most_queued < KEY_QUEUE_HARD * limit, (most_queued, limit)
    _in_order_once(env, events)


def _child(env: Harness, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name,
           "--topic", env.topic, "--dsn", env.dsn, "--bootstrap", env.bootstrap,
           "--table", env.projection.table, "--batch-size", "20", "--key-concurrency",
           str(CONCURRENCY), "--handler-wait-ms", "5", *env.codec_args, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("coroutine", [False, True], ids=["threads", "async-def"])
def test_sigkill_inside_a_handler_with_units_in_flight_loses_and_doubles_nothing(
        consumer_harness: Any, coroutine: bool) -> None:
    env = _harness(consumer_harness, "test.keypar.kill")
    events = _events(aggregates=30, versions=8)
    produce_events(env.bootstrap, env.topic, env.codec, events)
    mode = ("--async-handler",) if coroutine else ()
    killed = _child(env, "--kill-in-handler-at", "150", *mode)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    before = len(env.rows())
    assert 0 < before < len(events)
    again = _child(env, "--idle-exit", "2", *mode)
    assert again.returncode == 0, again.stderr[-2000:]
    stats = json.loads(again.stdout.strip().splitlines()[-1])
    assert stats["applied"] == len(events) - before
    _in_order_once(env, events)
    _end_offsets_committed(env, len(events))
