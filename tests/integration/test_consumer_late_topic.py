"""A consumer started before its topic exists consumes it within seconds of its creation,
without a restart (real Kafka and PostgreSQL)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.events import case_returned

#: The bound the runtime promises (its metadata refresh interval, 5 s, plus a rebalance).
PICKED_UP_WITHIN_S = 15.0


def test_a_topic_created_after_the_consumer_started_is_consumed_without_a_restart(
        consumer_harness: Any) -> None:
    env: Harness = consumer_harness("test.late")
    rt = env.start(env.runtime())  # assigned its re-drive topic; its own topic does not exist
    time.sleep(2.0)  # the group has settled on a subscription without the topic
    assert rt.stats.applied == 0
    create_topic(env.bootstrap, env.topic, 3)
    created = time.monotonic()
    event = case_returned("LATE", 1)
    produce_events(env.bootstrap, env.topic, env.codec, [event])
    wait_until(lambda: rt.stats.applied >= 1, timeout_s=PICKED_UP_WITHIN_S + 5)
    took = time.monotonic() - created
    print(f"\nevent on a topic created after the consumer started handled {took:.1f} s after "
          "the topic's creation")
    assert took < PICKED_UP_WITHIN_S, f"handled {took:.1f} s after the topic was created"
    env.stop(rt)
    env.one_effect_each([event.event_id])
    assert rt.stats.consumer_restarts == 0
