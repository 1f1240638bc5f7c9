"""ConsumerGroup against the real Kafka and PostgreSQL: two members of one group in one
process split the partitions, apply every event once, in order, and commit every offset."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from casestream.consumer import ConsumerGroup
from casestream.testing.consumer import Harness, committed, create_topic, produce_events, wait_until
from casestream.handlers.registry import HandlerRegistry
from tests.support.events import case_returned


def test_two_members_split_the_partitions_and_apply_every_event_once_in_order(
        consumer_harness: Any) -> None:
    env: Harness = consumer_harness("test.group")
    create_topic(env.bootstrap, env.topic, 4)
    group = ConsumerGroup(2, env.name, [env.topic], env.projection.register(HandlerRegistry()),
                          env.codec, env.pool, {"bootstrap.servers": env.bootstrap},
                          env.settings(batch_size=50))
    env.start(group)  # returns once both members have their assignment
    events = [case_returned(f"G{a}", v) for v in range(1, 11) for a in range(40)]
    produce_events(env.bootstrap, env.topic, env.codec, events)
    wait_until(lambda: group.stats.applied >= len(events), timeout_s=60)
    env.stop(group)

    assert all(m.stats.applied > 0 for m in group.members), [m.stats for m in group.members]
    assert group.stats.applied == sum(m.stats.applied for m in group.members) == 400
    assert (group.stats.stale, group.stats.held, group.stats.duplicates) == (0, 0, 0)
    env.one_effect_each([e.event_id for e in events])
    with psycopg.connect(env.dsn) as conn:
        guards = conn.execute("SELECT aggregate_id, last_version FROM consumer_version_guard"
                              " WHERE consumer = %s", (env.name,)).fetchall()
    assert sorted(guards) == sorted((f"G{a}", 10) for a in range(40))
    offsets = committed(env.bootstrap, env.name, env.topic, partitions=4)
    assert sum(offsets.values()) == 400, offsets
