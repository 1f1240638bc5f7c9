"""Failure classes of dead letters made by a running consumer on the real Kafka and
PostgreSQL, as ``casestream dlq groups`` labels them: a handler that times out on every
attempt is ``timeout`` (retryable), a version gap not filled in time is ``guard_gap``
(retryable), a handler that rejects the event is ``handler_rejected`` (not retryable) — each
its own group. (Corrupt bytes and handler errors: test_dlq_groups; unknown schema ids:
test_dlq; oversize: test_dead_letter_limits; schema resolution: the codec's unit tests.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from casestream.cli.dlq import dlq
from casestream.errors import PoisonMessageError
from casestream.retry import RetryPolicy
from casestream.testing.consumer import Harness, create_topic, produce_events
from tests.support.events import case_returned


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.dlqclasses")


def _classes(env: Harness) -> dict[str, bool]:
    result = CliRunner().invoke(dlq, ["--bootstrap", env.bootstrap, "groups", env.name, "--json"],
                                obj={"decoder": env.codec}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {g["failure_class"]: g["retryable"] for g in map(json.loads, result.output.splitlines())}


@pytest.mark.parametrize(("raised", "label", "retryable"), [
    (TimeoutError, "timeout", True), (PoisonMessageError, "handler_rejected", False),
], ids=["timeout", "rejected"])
def test_a_failing_handler_is_labelled_by_what_it_raised(env: Harness, raised: type[BaseException],
                                                         label: str, retryable: bool) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    event = case_returned("FC-1", 1)
    env.projection.fail_with = raised
    env.projection.fail[event.event_id] = 10**6
    produce_events(env.bootstrap, env.topic, env.codec, [event])
    env.start(env.runtime(env.settings(retry=RetryPolicy(max_attempts=2, initial_delay_s=0.05,
                                                         max_delay_s=0.1))))
    env.dead_letters(1)
    assert _classes(env) == {label: retryable}


def test_a_version_gap_not_filled_in_time_is_a_guard_gap(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    env.start(env.runtime(env.settings(gap_hold_s=1.0)))
    produce_events(env.bootstrap, env.topic, env.codec, [case_returned("FC-G", 1), case_returned("FC-G", 3)])
    env.dead_letters(1)
    assert _classes(env) == {"guard_gap": True}
