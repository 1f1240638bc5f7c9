"""Backoffs across rebalances and restarts, on the real Kafka and PostgreSQL.

One event's handler always raises ``RetryableError``; the retry policy is a constant backoff
(no jitter) and ``max_attempts`` attempts. While that event waits, group members join and
leave (one, two or three of them), or the consumer process is SIGKILLed and started again.
Whatever member gets the event next, it must be tried exactly ``max_attempts`` times in total,
never before its backoff is over, its dead letter must say so, and every partition must keep
making progress afterwards (none left paused by a pause from before the rebalance).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.retry import RetryPolicy
from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.events import case_returned

DELAY_S = 2.0
MAX_ATTEMPTS = 4
POLICY = RetryPolicy(initial_delay_s=DELAY_S, max_delay_s=DELAY_S, multiplier=1.0, jitter=0.0,
                     max_attempts=MAX_ATTEMPTS)
PARTITIONS = 6


class TimedCalls:
    """Handler wrapper: the monotonic time of every call of the watched event, any member."""

    def __init__(self, env: Harness, watched: str) -> None:
        self.env, self.watched, self.times = env, watched, []  # type: list[float]

    def handle(self, ctx: Any, event: Any) -> None:
        if event.event_id == self.watched:
            self.times.append(time.monotonic())
        self.env.projection.handle(ctx, event)

    def registry(self) -> HandlerRegistry:
        registry = HandlerRegistry()
        registry.add("CaseReturned", self.handle, kind=HandlerKind.PROJECTION)
        return registry


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("joining", [1, 2, 3])
def test_members_joining_and_leaving_during_backoff_never_exceed_max_attempts(
        consumer_harness: Any, joining: int) -> None:
    env: Harness = consumer_harness("test.rebalance")
    create_topic(env.bootstrap, env.topic, PARTITIONS)
    bad = case_returned("F", 1)
    env.projection.fail[bad.event_id] = 10**6  # never succeeds
    timed = TimedCalls(env, bad.event_id)
    others = [case_returned(f"K{a}", v) for v in (1, 2) for a in range(60)]
    settings = env.settings(batch_size=50, retry=POLICY)
    first = env.start(env.runtime(settings, timed.registry()))
    produce_events(env.bootstrap, env.topic, env.codec, [bad, *others])

    wait_until(lambda: len(timed.times) >= 1, timeout_s=20)
    joined = [env.start(env.runtime(settings, timed.registry())) for _ in range(joining)]
    wait_until(lambda: len(timed.times) >= 2, timeout_s=20)
    for member in joined:  # leave during a later backoff, one by one
        env.stop(member)
    [dl] = env.dead_letters(1, timeout_s=30)

    assert len(timed.times) == MAX_ATTEMPTS, _gaps(timed.times)
    assert all(g >= DELAY_S * 0.95 for g in _gaps(timed.times)), _gaps(timed.times)
    headers = dict(dl.headers)
    assert headers["dlq.attempts"] == str(MAX_ATTEMPTS).encode()
    assert headers["dlq.error.reason"] == b"retries_exhausted"
    # every partition still fetched by the member left: one more event per aggregate
    more = [case_returned(f"K{a}", 3) for a in range(60)]
    produce_events(env.bootstrap, env.topic, env.codec, more)
    wait_until(lambda: len(env.rows()) == len(others) + len(more), timeout_s=20)
    env.stop(first)
    env.one_effect_each([e.event_id for e in [*others, *more]])
    assert len(timed.times) == MAX_ATTEMPTS  # nothing tried after the dead letter


_CALL = re.compile(r"CALL (\S+) (\d+\.\d+)")


def _child(env: Harness, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name,
           "--topic", env.topic, "--dsn", env.dsn, "--bootstrap", env.bootstrap,
           "--table", env.projection.table, *env.codec_args,
           "--retry-delay-s", str(DELAY_S * 3), "--max-attempts", "2", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_process_restarted_during_backoff_waits_the_rest_and_keeps_counting(
        consumer_harness: Any) -> None:
    env: Harness = consumer_harness("test.restart")
    create_topic(env.bootstrap, env.topic, 1)
    bad, after = case_returned("R", 1), case_returned("S", 1)
    produce_events(env.bootstrap, env.topic, env.codec, [bad, after])

    killed = _child(env, "--fail-always", bad.event_id)
    try:
        row = wait_until(lambda: _retry_row(env, bad.event_id), timeout_s=30)
    finally:
        killed.send_signal(signal.SIGKILL)
        _out, err_killed = killed.communicate(timeout=30)
    attempts, due_epoch = row
    assert attempts == 1
    again = _child(env, "--fail-always", bad.event_id, "--expect", "1", "--idle-exit", "20")
    out, err = again.communicate(timeout=90)
    assert again.returncode == 0, err[-2000:]

    calls = [float(t) for eid, t in _CALL.findall(err_killed + err) if eid == bad.event_id]
    assert len(calls) == 2, (calls, err[-2000:])  # one before the kill, one after: the maximum
    assert calls[1] >= due_epoch - 0.05, (calls, due_epoch)  # waited the backoff it was owed
    [dl] = env.dead_letters(1, timeout_s=20)
    assert dict(dl.headers)["dlq.attempts"] == b"2"
    env.one_effect_each([after.event_id])


def _retry_row(env: Harness, event_id: str) -> tuple[int, float] | None:
    import psycopg

    with psycopg.connect(env.dsn) as conn:
        row = conn.execute("SELECT attempts, extract(epoch FROM next_attempt_at)::float8"
                           " FROM consumer_retry WHERE consumer = %s AND event_id = %s",
                           (env.name, event_id)).fetchone()
    return (row[0], row[1]) if row and row[1] else None
