"""Static membership (``group.instance.id``) against the real Kafka: an instance restarted
within the session timeout takes its partitions back without a rebalance of the others, and
a second instance with the same identity fences the first, which stops with
:class:`ConsumerFenced` (classic group protocol)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from casestream.consumer import ConsumerFenced, ConsumerRuntime
from casestream.handlers.registry import HandlerRegistry
from casestream.kafka.config import client_config
from casestream.testing.consumer import Harness, create_topic, wait_until


def _member(env: Harness, instance: str) -> ConsumerRuntime:
    return ConsumerRuntime(env.name, [env.topic], env.projection.register(HandlerRegistry()),
                           env.codec, env.pool,
                           {**client_config(env.bootstrap), "group.instance.id": instance},
                           env.settings())


def test_a_restart_within_the_session_timeout_moves_no_partition(consumer_harness: Any) -> None:
    env: Harness = consumer_harness("test.static")
    create_topic(env.bootstrap, env.topic, 4)
    a, b = env.start(_member(env, "s-1")), env.start(_member(env, "s-2"))
    wait_until(lambda: a._assigned and b._assigned and not (a._assigned & b._assigned), 30)
    time.sleep(2)  # the group settled
    held, before = set(a._assigned), (b.stats.assignments, b.stats.revocations)
    env.stop(a)
    again = env.start(_member(env, "s-1"))  # within session.timeout.ms (45 s)
    time.sleep(3)
    assert again._assigned == held
    assert (b.stats.assignments, b.stats.revocations) == before  # b saw no rebalance


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_second_instance_with_the_same_identity_fences_the_first(consumer_harness: Any) -> None:
    env: Harness = consumer_harness("test.static")
    create_topic(env.bootstrap, env.topic, 2)
    first = env.start(_member(env, "d-1"))
    thread = next(t for rt, t, _s in env.runtimes if rt is first)
    env.start(_member(env, "d-1"))
    thread.join(30)
    assert not thread.is_alive(), "the fenced member did not stop"
    [error] = thread.errors  # type: ignore[attr-defined]
    assert isinstance(error, ConsumerFenced) and "group.instance.id 'd-1'" in str(error)
