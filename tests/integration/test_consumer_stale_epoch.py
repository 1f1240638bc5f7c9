"""A commit with a stale member epoch under the consumer group protocol (KIP-848), against
the real Kafka (4.x) and PostgreSQL.

Under KIP-848 librdkafka heartbeats from its own thread, so a member whose application thread
stalls is expelled by ``max.poll.interval.ms`` (here 3 s), not by the session timeout. Member A
applies a batch and, just before committing its offsets, its loop thread is held 12 s (no
``consume``, so no rebalance callback runs): librdkafka leaves the group on its behalf and
member B, started meanwhile, is given the partition, applying from the last committed offset,
A's batch included.
Then A commits with the member epoch it held: that commit must not count (librdkafka 2.16
drops it for a member that left, or the coordinator refuses it as a stale epoch / unknown
member, logged and retried by the runtime), A's next ``consume`` reports the partition lost,
and A's batch is applied again from the last committed offset by whichever member owns the
partition. Every event has one effect (the inbox skips the second copy), none is lost, and
the group's committed offset reaches the end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from casestream.consumer import ConsumerRuntime
from casestream.handlers.registry import HandlerRegistry
from casestream.kafka.config import client_config
from casestream.testing.consumer import Harness, committed, create_topic, produce_events, run_in_thread, wait_until
from tests.support.events import case_returned

MAX_POLL_MS = 3000
STALL_S = 12.0  # A's loop held before its commit: past max.poll.interval.ms and B's next heartbeat


def test_a_commit_with_a_stale_member_epoch_loses_nothing_and_doubles_nothing(
        consumer_harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    env: Harness = consumer_harness("test.epoch")
    create_topic(env.bootstrap, env.topic, 1)
    stalled = threading.Event()
    registry = env.projection.register(HandlerRegistry())
    pools: list[Any] = []

    def member(tag: str) -> tuple[ConsumerRuntime, threading.Thread, threading.Event]:
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(env.dsn, min_size=1, max_size=3, open=True,
                              kwargs={"prepare_threshold": None})
        pools.append(pool)
        rt = ConsumerRuntime(env.name, [env.topic], registry, env.codec, pool,
                             {**client_config(env.bootstrap), "client.id": f"{env.name}.{tag}",
                              "max.poll.interval.ms": MAX_POLL_MS},
                             env.settings(batch_size=10, group_protocol="consumer",
                                          heartbeat_after_s=60.0))
        thread, stop = run_in_thread(rt)
        return rt, thread, stop

    first = [case_returned(f"E{i}", 1, seq=i) for i in range(5)]
    rest = [case_returned(f"E{i}", 1, seq=i) for i in range(5, 20)]
    a = b = None
    try:
        a = member("a")
        commit = a[0]._commit_pending

        def held_commit(*, wait: bool = False) -> None:
            # A's loop thread stops before committing offsets past the first five
            if not stalled.is_set() and any(o > 5 for o in a[0]._pending.values()):
                stalled.set()
                time.sleep(STALL_S)
            commit(wait=wait)

        a[0]._commit_pending = held_commit  # type: ignore[method-assign]
        wait_until(a[0].ready.is_set, timeout_s=60)
        produce_events(env.bootstrap, env.topic, env.codec, first)
        wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 5}, 30)
        produce_events(env.bootstrap, env.topic, env.codec, rest)
        wait_until(stalled.is_set, 30)
        b = member("b")  # joins while A's loop is held; takes the partition once A is out
        ids = [e.event_id for e in first + rest]
        wait_until(lambda: len(env.rows()) >= len(ids), 60, interval_s=0.3)
        wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 20}, 60,
                   interval_s=0.3)
        time.sleep(1.0)  # a late doubled effect would show now
    finally:
        for m in (a, b):
            if m is not None:
                m[2].set()
                m[1].join(30)
        for pool in pools:
            pool.close()
    failures = [r.getMessage() for r in caplog.records if "offset commit failed" in r.getMessage()]
    lost = [r.getMessage() for r in caplog.records if "partitions lost" in r.getMessage()]
    redone = a[0].stats.duplicates + b[0].stats.duplicates
    print(f"\nA: {a[0].stats}\nB: {b[0].stats}\ncommit failures: {failures}\nlost: {lost}")
    env.one_effect_each(ids)  # none lost, none doubled
    assert lost, "A's partition was not reported lost after its poll interval ran out"
    assert redone >= 1, "A's batch was not redone after its stale commit"
    assert not a[1].errors and not b[1].errors  # type: ignore[attr-defined]
