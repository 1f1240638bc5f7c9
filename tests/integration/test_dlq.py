"""Dead-letter topic and re-drive against the real Kafka and PostgreSQL.

Re-drive goes through ``<consumer>.redrive`` and the same decode / guard / inbox path as live
messages: after the cause is fixed a dead letter is processed once, re-driving it twice still has
one effect, events held behind it drain in order, and ``--accept-gap`` unparks an aggregate whose
missing event is lost. The CLI is exercised through click's runner.
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from casestream.cli.dlq import dlq
from casestream.retry import RetryPolicy
from casestream.testing.consumer import (
    Harness,
    committed,
    create_topic,
    produce,
    produce_events,
    wait_until,
)
from casestream.consumer.deadletters import read_topic, redrive
from tests.support.events import case_returned


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.dlq")


def _cli(env: Harness, *args: str) -> str:
    result = CliRunner().invoke(dlq, ["--bootstrap", env.bootstrap, *args],
                                obj={"decoder": env.codec}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_redrive_after_fix_is_processed_once_and_twice_is_still_once(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    bad, follower, other = case_returned("K", 1), case_returned("K", 2), case_returned("L", 1)
    env.projection.fail[bad.event_id] = 10**6  # "a bug" until fixed below
    rt = env.start(env.runtime(env.settings(
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.05, max_delay_s=0.1), gap_hold_s=60)))
    produce_events(env.bootstrap, env.topic, env.codec, [bad, follower, other])
    [dl] = env.dead_letters(1)
    assert dict(dl.headers)["dlq.error.reason"] == b"retries_exhausted"
    wait_until(lambda: rt.stats.applied >= 1 and rt.stats.held >= 1)
    assert env.versions("K") == [] and env.versions("L") == [1]  # K v2 waits behind v1
    assert env.guard("K") == ("holding", 0)

    out = _cli(env, "list", env.name)
    assert bad.event_id in out and "retries_exhausted" in out and "1 dead letter(s)" in out
    shown = _cli(env, "show", env.name, "--event-id", bad.event_id)
    assert "dlq.original.offset: 0" in shown and '"aggregate_id": "K"' in shown
    label = out.splitlines()[0].split()[0]  # PARTITION:OFFSET, as list prints it
    assert _cli(env, "show", env.name, label) == shown

    env.projection.fail.clear()  # the fix is deployed
    assert "re-drove 1" in _cli(env, "redrive", env.name, "--event-id", bad.event_id)
    wait_until(lambda: env.versions("K") == [1, 2])  # v1 once, then the held v2 drained
    assert env.guard("K") == ("flowing", 2)
    # resolved once its re-driven copy is consumed: no longer open, --all finds nothing to do
    wait_until(lambda: "0 open dead letter(s)" in _cli(env, "list", env.name, "--open"))
    assert "resolved" in _cli(env, "list", env.name)
    assert "re-drove 0" in _cli(env, "redrive", env.name, "--all")
    _cli(env, "redrive", env.name, "--event-id", bad.event_id)  # twice: one effect still
    wait_until(lambda: rt.stats.duplicates >= 1)
    env.one_effect_each([bad.event_id, follower.event_id, other.event_id])
    assert env.projection.calls[bad.event_id] == 3  # 2 failed attempts + 1 re-driven success


def test_accept_gap_redrive_unparks_an_aggregate_whose_missing_event_is_lost(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    b1, b3, b4 = case_returned("B", 1), case_returned("B", 3), case_returned("B", 4)
    rt = env.start(env.runtime(env.settings(gap_hold_s=1.0)))
    produce_events(env.bootstrap, env.topic, env.codec, [b1, b3, b4])
    [dl] = env.dead_letters(1)
    assert dict(dl.headers)["dlq.error.reason"] == b"version_gap"
    wait_until(lambda: env.guard("B") == ("parked", 1))
    # a plain re-drive does not skip the gap: v3 is still held, nothing applied
    _cli(env, "redrive", env.name, "--first", "1")
    wait_until(lambda: committed(env.bootstrap, env.name, f"{env.name}.redrive") == {0: 1})
    assert env.versions("B") == [1] and env.guard("B") == ("parked", 1)
    out = _cli(env, "redrive", env.name, "--event-id", b3.event_id, "--accept-gap")
    assert "accepting version gaps" in out
    wait_until(lambda: env.versions("B") == [1, 3, 4])
    assert env.guard("B") == ("flowing", 4)
    assert rt.stats.accepted_gaps == 1
    env.one_effect_each([b1.event_id, b3.event_id, b4.event_id])


def test_poison_redriven_again_is_dead_lettered_again_with_its_first_position(
        env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    ok = case_returned("P", 1)
    produce(env.bootstrap, env.topic, [(b"P", b"\x00\x7f\xff\xff\xf0garbage", [("id", b"junk")])])
    produce_events(env.bootstrap, env.topic, env.codec, [ok])
    env.start(env.runtime())
    [first] = env.dead_letters(1)
    assert dict(first.headers)["dlq.error.reason"] == b"unknown_schema_id"
    assert redrive(env.bootstrap, [first], f"{env.name}.redrive") == 1
    _first, again = env.dead_letters(2)
    h = dict(again.headers)
    assert again.value == first.value
    assert h["dlq.original.topic"] == env.topic.encode() and h["dlq.original.offset"] == b"0"
    assert h["dlq.redrive.count"] == b"1"
    env.one_effect_each([ok.event_id])
    assert len(read_topic(env.bootstrap, f"{env.name}.dlq")) == 2


def test_list_of_a_consumer_without_dead_letter_topic_names_the_known_ones(env: Harness) -> None:
    create_topic(env.bootstrap, f"{env.name}.dlq", 1)
    missing = f"nobody-{env.name}"
    result = CliRunner().invoke(dlq, ["--bootstrap", env.bootstrap, "list", missing],
                                obj={"decoder": env.codec})
    assert result.exit_code == 1, result.output
    assert f"no dead-letter topic {missing}.dlq; consumers with one: " in result.output
    assert "KafkaError" not in result.output and isinstance(result.exception, SystemExit)
