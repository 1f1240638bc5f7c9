"""Unit tests of casestream.retry: the one backoff policy (relay, consumer, notification)."""

from __future__ import annotations

import random

import pytest

from casestream.errors import ConfigError
from casestream.retry import RetryPolicy, call_with_retry


def test_base_delay_grows_exponentially_and_is_capped() -> None:
    p = RetryPolicy(initial_delay_s=0.1, max_delay_s=1.0, multiplier=2.0, jitter=0.0)
    assert [p.base_delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert p.base_delay(10_000) == 1.0  # no overflow for huge attempt counts


def test_jitter_stays_within_bounds_and_spreads() -> None:
    p = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0, jitter=0.5)
    rng = random.Random(7)
    delays = [p.delay(3, rand=rng.random) for _ in range(500)]
    assert all(2.0 <= d <= 4.0 for d in delays)
    assert max(delays) - min(delays) > 1.5  # actually jittered, not a constant


def test_jitter_extremes() -> None:
    p = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0, jitter=1.0)
    assert p.delay(2, rand=lambda: 0.0) == 2.0
    assert p.delay(2, rand=lambda: 0.999999) == pytest.approx(0.0, abs=1e-5)


def test_exhausted() -> None:
    assert not RetryPolicy().exhausted(10**9)
    p = RetryPolicy(max_attempts=3)
    assert not p.exhausted(2)
    assert p.exhausted(3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_delay_s": 0},
        {"initial_delay_s": 2, "max_delay_s": 1},
        {"multiplier": 0.5},
        {"jitter": 1.5},
        {"max_attempts": 0},
        {"max_elapsed_s": 0},
    ],
)
def test_invalid_policies_rejected(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)


def test_base_delay_rejects_zero_failures() -> None:
    with pytest.raises(ValueError):
        RetryPolicy().base_delay(0)


def test_call_with_retry_retries_then_returns() -> None:
    calls, sleeps, seen = [], [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    result = call_with_retry(
        flaky,
        policy=RetryPolicy(initial_delay_s=0.1, jitter=0.0),
        retryable=lambda e: isinstance(e, ConnectionError),
        sleep=sleeps.append,
        on_retry=lambda n, e, d: seen.append(n),
    )
    assert result == "ok"
    assert sleeps == pytest.approx([0.1, 0.2])
    assert seen == [1, 2]


def test_call_with_retry_does_not_retry_non_retryable() -> None:
    sleeps: list[float] = []

    def bad() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        call_with_retry(bad, policy=RetryPolicy(), retryable=lambda e: False, sleep=sleeps.append)
    assert sleeps == []


def test_call_with_retry_gives_up_after_max_attempts() -> None:
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        call_with_retry(
            down,
            policy=RetryPolicy(initial_delay_s=0.01, max_attempts=4),
            retryable=lambda e: True,
            sleep=lambda s: None,
        )
    assert len(calls) == 4


# -- the consumer's uses (ConsumerSettings.retry): same delays and bounds -------------------


def test_retry_delays_grow_exponentially_within_jitter_and_cap() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay_s=0.1, max_delay_s=1.0, jitter=0.5)
    rng = random.Random(7)
    for n, full in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        for _ in range(50):
            d = policy.delay(n, rand=rng.random)
            assert full * 0.5 - 1e-9 <= d <= full + 1e-9
    assert not policy.exhausted(4) and policy.exhausted(5)


def test_retry_without_jitter_is_deterministic() -> None:
    policy = RetryPolicy(initial_delay_s=0.5, max_delay_s=10, jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]


def test_max_elapsed_bounds_the_retries_independently_of_attempts() -> None:
    p = RetryPolicy(max_elapsed_s=10.0)
    assert not p.exhausted(1_000, 9.9)
    assert p.exhausted(1, 10.0)
    both = RetryPolicy(max_attempts=3, max_elapsed_s=10.0)
    assert both.exhausted(3, 0.0) and both.exhausted(1, 11.0) and not both.exhausted(2, 5.0)
    assert not RetryPolicy().bounded and p.bounded and RetryPolicy(max_attempts=1).bounded


def test_call_with_retry_gives_up_after_max_elapsed() -> None:
    calls: list[int] = []
    ticks = iter([0.0, 4.0, 8.0, 12.0, 16.0])

    def down() -> None:
        calls.append(1)
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        call_with_retry(down, policy=RetryPolicy(max_elapsed_s=10.0), retryable=lambda e: True,
                        sleep=lambda s: None, clock=lambda: next(ticks))
    assert len(calls) == 4  # failures at t=0, 4, 8 retried; the one at t=12 is past 10 s
