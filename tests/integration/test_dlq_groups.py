"""Dead letters grouped by failure, acted on per group from the CLI, against the real Kafka and
PostgreSQL: real dead letters of a running consumer (corrupt bytes, a failing handler) form one
group per cause; re-driving a non-retryable group (or a single poison entry) warns and asks;
a group is discarded or re-driven whole; ``dlq show`` prints the dead letter's own time as
such and decodes the event with its original publication time."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from click.testing import CliRunner

from casestream import telemetry
from casestream.cli.dlq import dlq
from casestream.operations import DeadLetterDepth
from casestream.retry import RetryPolicy
from casestream.testing.consumer import Harness, create_topic, produce, produce_events, wait_until
from tests.support.events import case_returned


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.dlqgroups")


def _cli(env: Harness, *args: str, input: str | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(dlq, ["--bootstrap", env.bootstrap, *args], input=input,
                                obj={"decoder": env.codec}, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def _groups(env: Harness) -> list[dict]:
    return [json.loads(line) for line in _cli(env, "groups", env.name, "--json").splitlines()]


def test_failures_grouped_by_cause_and_acted_on_per_group(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    failing = [case_returned(f"H{i}", 1) for i in range(3)]
    for e in failing:
        env.projection.fail[e.event_id] = 10**6  # "a bug" until fixed below
    produce(env.bootstrap, env.topic, [(b"G1", b"{not avro}", [("id", b"junk-1")]),
                                       (b"G2", b"{not avro either}", [("id", b"junk-2")])])
    time.sleep(1.1)  # the original publication and the dead letter's time differ visibly
    produce_events(env.bootstrap, env.topic, env.codec, failing)
    env.start(env.runtime(env.settings(retry=RetryPolicy(max_attempts=2, initial_delay_s=0.05,
                                                         max_delay_s=0.1))))
    env.dead_letters(5)

    groups = _groups(env)
    assert [(g["count"], g["failure_class"], g["retryable"]) for g in groups] == [
        (3, "handler_error", True), (2, "corrupt_bytes", False)]
    handler, corrupt = groups
    assert handler["first_seen"] <= handler["last_seen"] and handler["sample"] in handler["labels"]
    text = _cli(env, "groups", env.name)
    assert f"{corrupt['fingerprint']}  {env.name}      2  corrupt_bytes  NOT retryable" in text
    assert "2 open failure group(s)" in text

    # the gauge per group, as a service's /metrics serves it
    DeadLetterDepth(env.bootstrap, [env.name]).refresh()
    metrics = telemetry.render_prometheus(telemetry.current().metrics.collect())
    for g in groups:
        assert (f'dead_letter_group_open{{consumer="{env.name}",failure_class="{g["failure_class"]}",'
                f'fingerprint="{g["fingerprint"]}"}} {g["count"]}.0') in metrics

    # a non-retryable group, and a single poison entry: a warning and a question
    out = _cli(env, "redrive", env.name, "--group", corrupt["fingerprint"][:8], input="n\n", code=1)
    assert "warning: 2 of 2 dead letter(s) failed with a non-retryable class (corrupt_bytes)" in out
    assert "nothing re-driven" in out
    out = _cli(env, "redrive", env.name, "--label", corrupt["sample"], input="n\n", code=1)
    assert "warning: 1 of 1 dead letter(s)" in out and "nothing re-driven" in out
    out = _cli(env, "discard", env.name, "--group", corrupt["fingerprint"],
               "--reason", "garbage from a test producer")
    assert "discarded 2" in out
    assert [g["failure_class"] for g in _groups(env)] == ["handler_error"]

    # dlq show: the dead letter's own time as such, the event with its original publication time
    shown = _cli(env, "show", env.name, handler["sample"])
    dead_at = re.search(r"dead-lettered at (\S+)", shown).group(1)
    published = re.search(r'"published_at": "([^"]+)"', shown).group(1)
    assert published[:19].replace(" ", "T") < dead_at[:19], shown

    env.projection.fail.clear()  # the fix is deployed: the whole group re-driven, no question
    out = _cli(env, "redrive", env.name, "--group", handler["fingerprint"])
    assert "warning" not in out and "re-drove 3" in out
    wait_until(lambda: all(env.versions(e.aggregate_id) == [1] for e in failing), 30)
    wait_until(lambda: _groups(env) == [], 30)
