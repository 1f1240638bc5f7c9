"""Consumer runtime against the real Kafka and PostgreSQL: duplicates, poison, version guard,
retries, rebalance. Each test uses its own topic, consumer name and effects table.

Effects are rows in a table without a unique key (``EffectsProjection``), so a doubled effect
is visible as a second row; offsets are checked with the group's committed positions.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.retry import RetryPolicy
from casestream.testing.consumer import (
    Harness,
    committed,
    create_topic,
    produce,
    produce_events,
    wait_until,
)
from casestream.handlers.registry import HandlerKind, HandlerRegistry
from tests.support.events import case_returned

FAST_RETRY = RetryPolicy(max_attempts=5, initial_delay_s=0.05, max_delay_s=0.2, jitter=0.2)
Env = Harness


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness()


def _applied(rt: ConsumerRuntime, n: int) -> bool:
    return rt.stats.applied >= n


def test_duplicate_delivery_also_across_restart_has_one_effect(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    e1, e2 = case_returned("A", 1), case_returned("A", 2)
    produce_events(env.bootstrap, env.topic, env.codec, [e1, e1, e2, e2])
    rt = env.start(env.runtime())
    wait_until(lambda: rt.stats.applied + rt.stats.duplicates >= 4)
    env.stop(rt)  # a batch is counted after its events: read the stats once it has ended
    assert (rt.stats.applied, rt.stats.duplicates) == (2, 2)
    assert rt.stats.fast_batches == rt.stats.batches > 0  # plain batches take the fast path
    # the same events delivered again to a restarted consumer (same name = same inbox)
    produce_events(env.bootstrap, env.topic, env.codec, [e1, e2])
    rt2 = env.start(env.runtime())
    wait_until(lambda: rt2.stats.duplicates >= 2)
    env.stop(rt2)
    env.one_effect_each([e1.event_id, e2.event_id])
    assert rt2.stats.applied == 0
    assert committed(env.bootstrap, env.name, env.topic) == {0: 6}


def test_garbage_between_two_valid_messages_is_dead_lettered_and_skipped(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    e1, e2 = case_returned("G", 1), case_returned("G", 2)
    produce(env.bootstrap, env.topic, [
        (b"G", env.codec.encode(e1), [("id", e1.event_id.encode()), ("type", b"CaseReturned"),
                                       ("correlation_id", b"corr-G"),
                                       ("traceparent", b"00-aa-bb-01")]),
        (b"G", b"this is not avro, mail me at someone@example.com",
         [("id", b"garbage-1"), ("correlation_id", b"corr-G"), ("traceparent", b"00-aa-bb-01")]),
        (b"G", env.codec.encode(e2), [("id", e2.event_id.encode())]),
    ])
    rt = env.start(env.runtime())
    wait_until(lambda: _applied(rt, 2) and rt.stats.dead_lettered == 1)
    env.one_effect_each([e1.event_id, e2.event_id])
    [dl] = env.dead_letters(1)
    assert dl.value == b"this is not avro, mail me at someone@example.com"  # bytes unchanged
    assert dl.key == b"G"
    h = dict(dl.headers)
    assert h["dlq.original.topic"] == env.topic.encode()
    assert h["dlq.original.partition"] == b"0"
    assert h["dlq.original.offset"] == b"1"
    assert int(h["dlq.original.timestamp"]) > 0
    assert h["dlq.consumer"] == env.name.encode()
    assert h["dlq.error.class"].endswith(b"PoisonMessageError")
    assert h["dlq.error.reason"] == b"bad_magic_byte"
    assert b"@" not in h["dlq.error.message"]
    assert h["dlq.attempts"] == b"1"
    assert h["dlq.first.failure"] and h["dlq.last.failure"]
    assert h["correlation_id"] == b"corr-G" and h["traceparent"] == b"00-aa-bb-01"
    assert h["id"] == b"garbage-1"
    wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 3})
    time.sleep(0.5)
    assert rt.stats.dead_lettered == 1  # no crash loop, no second dead letter


def test_version_guard_stale_gap_filled_and_gap_parked_while_others_flow(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    settings = ConsumerSettings(batch_size=100, poll_timeout_s=0.1, retry=FAST_RETRY,
                                gap_hold_s=3.0, sweep_interval_s=0.2)
    a1, a2, a3 = (case_returned("A", v) for v in (1, 2, 3))
    stale_a1 = case_returned("A", 1)  # another copy of version 1 (new event id)
    b1, b3, b4 = case_returned("B", 1), case_returned("B", 3), case_returned("B", 4)
    c = [case_returned("C", v) for v in (1, 2, 3)]
    rt = env.start(env.runtime(settings))
    # A: v1, v3 (gap: held), stale v1 copy (skipped), then v2 arrives -> v2, v3 applied in order
    produce_events(env.bootstrap, env.topic, env.codec, [a1, a3, stale_a1])
    wait_until(lambda: rt.stats.held >= 1 and rt.stats.stale >= 1)
    assert [r[2] for r in env.rows() if r[1] == "A"] == [1]
    produce_events(env.bootstrap, env.topic, env.codec, [a2])
    wait_until(lambda: len([r for r in env.rows() if r[1] == "A"]) == 3)
    assert [r[2] for r in env.rows() if r[1] == "A"] == [1, 2, 3]
    # B: v1, v3 and v2 never comes; C flows on the same partition meanwhile; B v4 waits behind
    t0 = time.monotonic()
    produce_events(env.bootstrap, env.topic, env.codec, [b1, b3, *c, b4])
    wait_until(lambda: len([r for r in env.rows() if r[1] == "C"]) == 3, 10)
    assert time.monotonic() - t0 < settings.gap_hold_s, "C waited for B's gap"
    [dl] = env.dead_letters(1, timeout_s=settings.gap_hold_s + 15)
    assert dict(dl.headers)["dlq.error.reason"] == b"version_gap"
    assert dict(dl.headers)["id"] == b3.event_id.encode()
    assert rt.stats.parked == 1
    assert [r[2] for r in env.rows() if r[1] == "B"] == [1]  # v3 and v4 wait behind the gap
    with psycopg.connect(env.dsn) as conn:
        state, last = conn.execute(
            "SELECT state, last_version FROM consumer_version_guard WHERE consumer = %s"
            " AND aggregate_id = 'B'", (env.name,)).fetchone()
        held = conn.execute("SELECT aggregate_version FROM consumer_held_event WHERE consumer = %s"
                            " ORDER BY 1", (env.name,)).fetchall()
    assert (state, last) == ("parked", 1) and [h[0] for h in held] == [3, 4]
    # committed offsets moved past the held events: nothing is lost on restart (they are in PG)
    wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 10})


def test_held_events_drain_when_their_gap_is_filled_in_the_same_poll(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    a = {v: case_returned("A", v) for v in (1, 2, 3)}
    b = {v: case_returned("B", v) for v in (1, 2, 3, 4)}
    # all in one poll batch: A v3 held then filled by v2; B v4 and v3 held then filled by v2
    order = [a[1], a[3], a[2], b[1], b[4], b[3], b[2]]
    produce_events(env.bootstrap, env.topic, env.codec, order)
    rt = env.start(env.runtime())
    wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: len(order)})
    assert env.versions("A") == [1, 2, 3] and env.versions("B") == [1, 2, 3, 4]
    env.one_effect_each(e.event_id for e in order)
    assert (rt.stats.held, rt.stats.drained) == (3, 3)
    assert env.guard("A") == ("flowing", 3) and env.guard("B") == ("flowing", 4)
    with psycopg.connect(env.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM consumer_held_event WHERE consumer = %s",
                            (env.name,)).fetchone()[0] == 0


def test_transient_failures_are_retried_then_succeed_once(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 2)
    flaky = case_returned("F", 1)
    after = case_returned("F", 2)
    others = [case_returned(f"O{i}", 1) for i in range(20)]
    env.projection.fail[flaky.event_id] = 3
    settings = ConsumerSettings(batch_size=100, poll_timeout_s=0.1, sweep_interval_s=0.2,
                                retry=RetryPolicy(max_attempts=5, initial_delay_s=0.3,
                                                  max_delay_s=1.0, jitter=0.0))
    rt = env.start(env.runtime(settings))
    produce_events(env.bootstrap, env.topic, env.codec, [flaky, after], partition=0)
    produce_events(env.bootstrap, env.topic, env.codec, others, partition=1)
    wait_until(lambda: _applied(rt, 22), 20)
    env.one_effect_each([flaky.event_id, after.event_id, *[o.event_id for o in others]])
    assert env.projection.calls[flaky.event_id] == 4  # 3 failures + 1 success
    assert rt.stats.retries == 3 and rt.stats.dead_lettered == 0
    rows = env.rows()
    # the other partition did not wait for the backoff (0.3 + 0.6 + 1.2 s) of partition 0
    assert [r[0] for r in rows].index(others[-1].event_id) < [r[0] for r in rows].index(
        flaky.event_id)
    assert [r[2] for r in rows if r[1] == "F"] == [1, 2]  # order kept within the aggregate


def test_always_failing_handler_ends_in_dlq_after_configured_attempts(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    bad, good = case_returned("X", 1), case_returned("Y", 1)
    env.projection.fail[bad.event_id] = 10**6
    settings = ConsumerSettings(batch_size=100, poll_timeout_s=0.1, sweep_interval_s=0.2,
                                retry=RetryPolicy(max_attempts=3, initial_delay_s=0.05, max_delay_s=0.1))
    rt = env.start(env.runtime(settings))
    produce_events(env.bootstrap, env.topic, env.codec, [bad, good])
    [dl] = env.dead_letters(1)
    h = dict(dl.headers)
    assert h["dlq.attempts"] == b"3" and h["dlq.error.reason"] == b"retries_exhausted"
    assert h["dlq.error.class"] == b"casestream.errors.RetryableError"
    assert h["dlq.first.failure"] < h["dlq.last.failure"]
    wait_until(lambda: _applied(rt, 1))
    time.sleep(0.5)
    assert env.projection.calls[bad.event_id] == 3  # not retried forever
    env.one_effect_each([good.event_id])
    wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 2})


def test_second_consumer_joining_mid_stream_loses_and_doubles_nothing(env: Env) -> None:
    create_topic(env.bootstrap, env.topic, 4)
    events = [case_returned(f"R{a}", v) for v in range(1, 11) for a in range(300)]
    produce_events(env.bootstrap, env.topic, env.codec, events)
    slow = env.projection.handle

    def handle(ctx: Any, event: Any) -> None:
        time.sleep(0.003)  # keep the stream going (~9 s alone) long enough for the rebalance
        slow(ctx, event)

    def registry() -> HandlerRegistry:
        r = HandlerRegistry()
        r.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
        return r

    settings = ConsumerSettings(batch_size=50, poll_timeout_s=0.1, retry=FAST_RETRY)
    first = env.start(env.runtime(settings, registry()))
    wait_until(lambda: _applied(first, 200), 30)
    second = env.start(env.runtime(settings, registry()))
    assert first.stats.applied < len(events), "the stream ended before the second consumer joined"
    assert first.stats.revocations >= 1  # the join revoked the first consumer's partitions
    wait_until(lambda: first.stats.applied + second.stats.applied >= len(events), 120)
    time.sleep(1.0)
    env.stop(first)
    env.stop(second)
    assert second.stats.applied > 0, "the second consumer never got a partition"
    env.one_effect_each([e.event_id for e in events])
    by_agg: dict[str, list[int]] = {}
    for _eid, agg, ver in env.rows():
        by_agg.setdefault(agg, []).append(ver)
    assert all(v == list(range(1, 11)) for v in by_agg.values())


def test_a_handler_running_longer_than_max_poll_interval_keeps_its_partitions(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    slow_event, next_event = case_returned("W", 1), case_returned("W", 2)
    inner = env.projection.handle

    def handle(ctx: Any, event: Any) -> None:
        if event.event_id == slow_event.event_id:
            time.sleep(10.0)  # > max.poll.interval.ms below
        inner(ctx, event)

    registry = HandlerRegistry()
    registry.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
    rt = ConsumerRuntime(env.name, [env.topic], registry, env.codec, env.pool,
                         {"bootstrap.servers": env.bootstrap, "session.timeout.ms": 6000,
                          "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 7000},
                         env.settings(heartbeat_after_s=1.0))
    env.start(rt)
    produce_events(env.bootstrap, env.topic, env.codec, [slow_event, next_event])
    wait_until(lambda: rt.stats.applied >= 2, 40)
    assert rt.stats.revocations == 0 and rt.stats.assignments == 1  # never evicted
    env.one_effect_each([slow_event.event_id, next_event.event_id])
    wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 2})


def test_lost_database_connection_rolls_back_the_batch_and_retries_it(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    events = [case_returned("D", v) for v in (1, 2, 3)]
    inner = env.projection.handle
    killed: list[str] = []

    def handle(ctx: Any, event: Any) -> None:
        inner(ctx, event)
        if event.aggregate_version == 2 and not killed:
            killed.append(event.event_id)
            ctx.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    registry = HandlerRegistry()
    registry.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
    rt = env.start(env.runtime(registry=registry))
    produce_events(env.bootstrap, env.topic, env.codec, events)
    wait_until(lambda: rt.stats.applied >= 3, 30)
    assert killed and rt.stats.infra_failures >= 1
    assert rt.stats.dead_lettered == 0 and rt.stats.retries == 0  # not counted against messages
    env.one_effect_each([e.event_id for e in events])
    assert env.versions("D") == [1, 2, 3]
