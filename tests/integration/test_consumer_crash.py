"""Crash safety of the consumer runtime: a consumer process is SIGKILLed at the worst moments
and a restarted one must leave exactly one effect per event.

The child is ``python -m casestream.testing.consumer`` (a real ConsumerRuntime on the real Kafka
and PostgreSQL): ``--kill-before-offset-commit`` kills it after the batch transaction committed
but before the offset commit; ``--kill-in-handler-at N`` kills it inside the handler of event
``seq=N``, i.e. with the batch transaction open.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from casestream.testing.consumer import Harness, committed, create_topic, produce_events
from tests.support.events import case_returned

N = 30


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.crash")


def _child(env: Harness, *extra: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name,
           "--topic", env.topic, "--dsn", env.dsn, "--bootstrap", env.bootstrap,
           "--table", env.projection.table, "--batch-size", "10", *env.codec_args, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def _events(env: Harness) -> list[str]:
    create_topic(env.bootstrap, env.topic, 1)
    events = [case_returned(f"S{i % 3}", i // 3 + 1, seq=i) for i in range(N)]
    produce_events(env.bootstrap, env.topic, env.codec, events)
    return [e.event_id for e in events]


def test_killed_after_db_commit_before_offset_commit_redelivers_with_one_effect(
        env: Harness) -> None:
    ids = _events(env)
    killed = _child(env, "--kill-before-offset-commit")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    done_before = len(env.rows())
    assert done_before > 0, "the first batch should have committed in the database"
    # only the start position committed at assignment (lag visible), no batch's offset
    assert committed(env.bootstrap, env.name, env.topic) == {0: 0}

    again = _child(env, "--expect", str(N), "--idle-exit", "10")
    assert again.returncode == 0, again.stderr[-2000:]
    stats = json.loads(again.stdout.strip().splitlines()[-1])
    assert stats["duplicates"] == done_before  # redelivered, recognised by the inbox
    env.one_effect_each(ids)
    assert committed(env.bootstrap, env.name, env.topic) == {0: N}


def test_killed_before_db_commit_redelivers_with_one_effect(env: Harness) -> None:
    ids = _events(env)
    killed = _child(env, "--kill-in-handler-at", "15")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    rows = env.rows()
    assert len(rows) < 16, "the transaction holding seq=15 must not have committed"
    offset = committed(env.bootstrap, env.name, env.topic)[0] or 0
    # never ahead of the database; behind it by what commit_interval_s had not yet sent
    assert offset <= len(rows)

    again = _child(env, "--expect", str(N - offset), "--idle-exit", "10")
    assert again.returncode == 0, again.stderr[-2000:]
    env.one_effect_each(ids)
    assert committed(env.bootstrap, env.name, env.topic) == {0: N}
