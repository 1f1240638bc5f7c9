"""A consumer runtime across a broker outage: it rejoins, applies everything once, never stalls.

The broker is a private single-node Kafka (``casestream.testing.relay.PrivateKafka``) so it can
be SIGKILLed and started again without disturbing the shared one. Events are produced while the
broker is up, before and after the outage; the outage lasts longer than the session timeout
(6 s, as in the soak), so librdkafka drops the assignment (``on_lost``) and rejoins. The
loop must keep running through the outage: with ``stall_after_s=20`` a loop held by a
synchronous offset commit for the outage (8 s down + the broker's start) counts as a stall.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from casestream.consumer import ConsumerRuntime
from casestream.handlers import HandlerRegistry
from casestream.testing import end_offsets
from casestream.testing.consumer import (
    FramedJsonCodec,
    Harness,
    committed,
    create_topic,
    produce_events,
    wait_until,
)
from casestream.testing.relay import PrivateKafka
from tests.support.events import case_returned


def _started(h: Harness, partitions: int, **settings: Any) -> ConsumerRuntime:
    """A runtime on a new ``partitions``-partition topic of ``h``, session timeout 6 s (as in
    the soak), batches of 20, started."""
    create_topic(h.bootstrap, h.topic, partitions)
    rt = ConsumerRuntime(h.name, [h.topic], h.projection.register(HandlerRegistry()), h.codec,
                         h.pool, {"bootstrap.servers": h.bootstrap, "session.timeout.ms": 6000},
                         h.settings(batch_size=20, **settings))
    h.start(rt)
    return rt


def _rest_applied_once(h: Harness, rt: ConsumerRuntime, events: list[Any], produced: int,
                       partitions: int) -> None:
    """Produce ``events[produced:]``; then every event of ``events`` must be applied, the
    group's committed offsets must reach the topic's ends, and each event has one effect."""
    produce_events(h.bootstrap, h.topic, h.codec, events[produced:])
    wait_until(lambda: rt.stats.applied >= len(events), 90)
    ends = end_offsets(h.bootstrap, [h.topic])[h.topic]
    wait_until(lambda: committed(h.bootstrap, h.name, h.topic, partitions) == ends, 30)
    h.one_effect_each([e.event_id for e in events])


def test_a_consumer_rejoins_after_a_broker_restart_and_applies_every_event_once(
        private_kafka: PrivateKafka, pg_url: str) -> None:
    h = Harness.create(private_kafka.bootstrap, pg_url, codec=FramedJsonCodec(),
                       prefix="test.restart")
    try:
        rt = _started(h, 6, stall_after_s=20.0)
        before = [case_returned(f"agg-{i % 30}", i // 30 + 1) for i in range(300)]
        produce_events(h.bootstrap, h.topic, h.codec, before[:150])
        wait_until(lambda: rt.stats.applied >= 20, 30)
        private_kafka.kill()
        time.sleep(8.0)  # longer than session.timeout.ms: the assignment is lost
        private_kafka.start()
        _rest_applied_once(h, rt, before, 150, 6)
        assert rt.stats.stalls == 0 and rt.stalled() is None
        assert rt.stats.assignments >= 2  # it rejoined
        h.stop(rt)
    finally:
        h.close()


@pytest.mark.parametrize("key_concurrency", [1, 3], ids=["batch-loop", "key-parallel"])
def test_a_consumer_left_without_assignment_replaces_its_client_and_still_applies_once(
        private_kafka: PrivateKafka, pg_url: str, key_concurrency: int) -> None:
    """With ``rejoin_timeout_s=4`` the outage outlasts the bound after the loss: the runtime
    closes its Kafka client and subscribes a new one, possibly more than once; the new client
    joins the group when the broker is back and nothing is lost or doubled (both loops)."""
    h = Harness.create(private_kafka.bootstrap, pg_url, codec=FramedJsonCodec(),
                       prefix="test.rejoin")
    try:
        rt = _started(h, 4, rejoin_timeout_s=4.0, key_concurrency=key_concurrency)
        events = [case_returned(f"agg-{i % 20}", i // 20 + 1) for i in range(200)]
        produce_events(h.bootstrap, h.topic, h.codec, events[:100])
        wait_until(lambda: rt.stats.applied >= 100, 30)
        time.sleep(5.0)  # longer than the bound while assigned: no replacement
        assert rt.stats.consumer_restarts == 0
        private_kafka.kill()
        wait_until(lambda: rt.stats.consumer_restarts >= 1, 40)  # lost after 6 s, then 4 s
        private_kafka.start()
        _rest_applied_once(h, rt, events, 100, 4)
        assert rt.rejoin_overdue() is None and rt.stats.assignments >= 2
        h.stop(rt)
    finally:
        h.close()
