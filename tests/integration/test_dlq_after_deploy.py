"""Re-drive after deploy against the real Kafka and PostgreSQL: a consumer of build 1.0.0
rejects events (a non-retryable class); the operator asks from the CLI for the group to be
re-driven after the deploy; nothing happens while 1.0.0 runs (the check says so, the entries
stay open, no copy is made); the fixed build 1.0.1 replaces it, and the service's worker
re-drives the group by itself, once, in the requester's name — the events are applied."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from casestream.cli.dlq import dlq
from casestream.consumer.runtime import ConsumerRuntime
from casestream.errors import PoisonMessageError
from casestream.handlers import HandlerRegistry
from casestream.kafka.builds import consumer_client_id
from casestream.kafka.config import client_config
from casestream.operations import (
    ACTION_REDRIVE,
    ACTION_REDRIVE_AFTER_DEPLOY,
    AfterDeployRedrives,
    consumer_builds,
    read_actions,
    redrive_after_deploy_due,
)
from casestream.operations.deadletters import load_dead_letter_state, read_if_exists
from casestream.retry import RetryPolicy
from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.events import case_returned


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.afterdeploy")


def _cli(env: Harness, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(dlq, ["--bootstrap", env.bootstrap, *args], obj={"decoder": env.codec},
                                catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def _runtime(env: Harness, build: str) -> ConsumerRuntime:
    config = {**client_config(env.bootstrap), "client.id": consumer_client_id(env.name, build)}
    return ConsumerRuntime(env.name, [env.topic], env.projection.register(HandlerRegistry()), env.codec,
                           env.pool, config, env.settings(retry=RetryPolicy(max_attempts=1)))


def test_a_group_waits_for_the_new_build_then_is_redriven_once_by_itself(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    events = [case_returned(f"AD{i}", 1) for i in range(3)]
    env.projection.fail_with = PoisonMessageError  # the bug of build 1.0.0: rejects these events
    for e in events:
        env.projection.fail[e.event_id] = 10**6
    produce_events(env.bootstrap, env.topic, env.codec, events)
    old = env.start(_runtime(env, "1.0.0"))
    env.dead_letters(3)
    [group] = [json.loads(line) for line in _cli(env, "groups", env.name, "--json").splitlines()]
    assert group["failure_class"] == "handler_rejected" and not group["retryable"]
    assert consumer_builds(env.bootstrap, env.name).builds == ("1.0.0",)

    out = _cli(env, "redrive", env.name, "--group", group["fingerprint"], "--after-deploy",
               "--reason", "rejection fixed in 1.0.1", "--actor", "ops-carol")
    assert "waits for a deploy of" in out and "other than build 1.0.0" in out
    [request] = [a for a in read_actions(env.bootstrap)
                 if a.action == ACTION_REDRIVE_AFTER_DEPLOY and a.target == env.name]
    assert request.params["builds"] == "1.0.0" and request.params["fingerprint"] == group["fingerprint"]
    assert sorted(request.items) == sorted(group["labels"]) and request.actor == "ops-carol"
    assert request.action_id in _cli(env, "pending", env.name)

    # the old build still runs: nothing is re-driven, however often it is checked
    assert redrive_after_deploy_due(env.bootstrap, env.name) == []
    assert read_if_exists(env.bootstrap, f"{env.name}.redrive") == []
    assert load_dead_letter_state(env.bootstrap, env.name).depth == 3

    # the deploy: 1.0.0 leaves, the fixed 1.0.1 joins; the service's worker does the rest
    env.stop(old)
    env.projection.fail.clear()
    env.projection.fail_with = None
    env.start(_runtime(env, "1.0.1"))
    worker, stop = AfterDeployRedrives(env.bootstrap, [env.name], interval_s=0.5), threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: all(env.versions(e.aggregate_id) == [1] for e in events), 60)
        wait_until(lambda: load_dead_letter_state(env.bootstrap, env.name).depth == 0, 30)
        assert worker.check() == []  # done: a later pass re-drives nothing more
    finally:
        stop.set()
        thread.join(10)
    redrives = [a for a in read_actions(env.bootstrap) if a.action == ACTION_REDRIVE and a.target == env.name]
    assert len(redrives) == 1, redrives
    [done] = redrives
    assert done.params["request"] == request.action_id and done.actor == "ops-carol"
    assert "(after deploy: build 1.0.0 -> 1.0.1)" in done.reason and "re-drove 3" in done.detail
    assert "0 re-drive(s) waiting" in _cli(env, "pending", env.name)
    env.one_effect_each(e.event_id for e in events)


def test_a_request_is_refused_while_no_member_reports_a_build(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    [event] = [case_returned("AD-nobuild", 1)]
    env.projection.fail_with = PoisonMessageError
    env.projection.fail[event.event_id] = 10**6
    produce_events(env.bootstrap, env.topic, env.codec, [event])
    env.start(env.runtime(env.settings(retry=RetryPolicy(max_attempts=1))))  # no build in its client id
    env.dead_letters(1)
    [group] = [json.loads(line) for line in _cli(env, "groups", env.name, "--json").splitlines()]
    out = _cli(env, "redrive", env.name, "--group", group["fingerprint"], "--after-deploy", code=1)
    assert "reports no build" in out and "CASESTREAM_BUILD" in out
    assert not [a for a in read_actions(env.bootstrap) if a.target == env.name]
