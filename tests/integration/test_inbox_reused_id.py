"""A different message reusing a recorded event id is dead-lettered and counted, never dropped as
a duplicate; a true redelivery (same content) stays a duplicate. Real Kafka and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
import pytest

from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.events import case_returned


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness()


def test_reused_event_id_with_another_body_is_dead_lettered(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    e1 = case_returned("R", 1)
    impostor = replace(e1, payload={"reason": "another body"}, aggregate_version=2)
    produce_events(env.bootstrap, env.topic, env.codec, [e1, e1, impostor])
    rt = env.start(env.runtime())
    wait_until(lambda: rt.stats.applied + rt.stats.duplicates + rt.stats.dead_lettered >= 3)
    env.stop(rt)
    assert (rt.stats.applied, rt.stats.duplicates, rt.stats.reused_ids) == (1, 1, 1)
    dead = env.dead_letters(1)
    assert dict(dead[0].headers)["dlq.error.reason"] == b"reused_event_id"
    env.one_effect_each([e1.event_id])


def test_rows_recorded_before_the_hash_column_stay_duplicates(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    e1 = case_returned("O", 1)
    produce_events(env.bootstrap, env.topic, env.codec, [e1])
    rt = env.start(env.runtime())
    wait_until(lambda: rt.stats.applied >= 1)
    env.stop(rt)
    with psycopg.connect(env.dsn, autocommit=True) as conn:  # a row from before the column
        conn.execute("UPDATE consumer_inbox SET payload_hash = NULL WHERE consumer = %s", (env.name,))
    produce_events(env.bootstrap, env.topic, env.codec, [replace(e1, payload={"reason": "x"})])
    rt2 = env.start(env.runtime())
    wait_until(lambda: rt2.stats.duplicates >= 1)
    env.stop(rt2)
    assert (rt2.stats.duplicates, rt2.stats.reused_ids) == (1, 0)
