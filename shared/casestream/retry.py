"""Retry policy: bounded exponential backoff with jitter (pure, stdlib only).

Used by the outbox relay to reschedule a row after a transient broker error
(``outbox.next_attempt_at = now + delay``) and to pace reconnects to PostgreSQL and
Kafka; the consumer runtime may use it for retryable handler errors.

The delay before attempt ``n + 1`` after ``n`` failed attempts (``n >= 1``) is::

    base  = min(max_delay_s, initial_delay_s * multiplier ** (n - 1))
    delay = base * (1 - jitter * U),   U uniform in [0, 1)

so it grows exponentially, never exceeds ``max_delay_s`` and is spread by up to
``jitter * 100`` percent below the exponential curve ("equal"/"proportional" jitter,
AWS Architecture Blog "Exponential Backoff and Jitter"). With ``jitter=1`` this is
"full jitter". ``max_attempts`` bounds the number of attempts (``None``: unbounded).
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

__all__ = ["RetryPolicy", "call_with_retry"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in delay and (optionally) attempts.

    Attributes:
        initial_delay_s: delay after the first failure, seconds (> 0).
        max_delay_s: upper bound of any delay, seconds (>= initial_delay_s).
        multiplier: growth factor per failed attempt (>= 1).
        jitter: fraction in [0, 1] by which a delay is randomly shortened.
        max_attempts: attempts allowed in total (first try included); ``None`` = unbounded.
    """

    initial_delay_s: float = 0.1
    max_delay_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial_delay_s <= 0:
            raise ValueError(f"initial_delay_s must be > 0, got {self.initial_delay_s}")
        if self.max_delay_s < self.initial_delay_s:
            raise ValueError("max_delay_s must be >= initial_delay_s")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")

    def base_delay(self, failures: int) -> float:
        """Delay in seconds before the next attempt after ``failures`` (>= 1) failures, no jitter."""
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures}")
        # Cap the exponent so huge attempt counts cannot overflow a float.
        exponent = min(failures - 1, 1024)
        try:
            raw = self.initial_delay_s * self.multiplier**exponent
        except OverflowError:
            return self.max_delay_s
        return min(self.max_delay_s, raw)

    def delay(self, failures: int, *, rand: Callable[[], float] = _random.random) -> float:
        """Delay in seconds before the next attempt after ``failures`` (>= 1) failures.

        ``rand`` returns a float in [0, 1); pass a seeded generator's ``random`` for
        reproducible tests. The result lies in ``[(1 - jitter) * base, base]``.
        """
        base = self.base_delay(failures)
        return base * (1.0 - self.jitter * rand())

    def exhausted(self, attempts: int) -> bool:
        """True when ``attempts`` attempts (failed so far) reach ``max_attempts``."""
        return self.max_attempts is not None and attempts >= self.max_attempts


def call_with_retry(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    retryable: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Call ``fn`` until it returns, retrying errors for which ``retryable(e)`` is true.

    Sleeps ``policy.delay(n)`` seconds after the n-th failure. Re-raises the last error
    when it is not retryable or when ``policy.max_attempts`` is reached.
    ``on_retry(failures, error, delay_s)`` is called before each sleep (logging, metrics).
    """
    failures = 0
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified by the caller's predicate
            failures += 1
            if not retryable(e) or policy.exhausted(failures):
                raise
            delay = policy.delay(failures)
            if on_retry is not None:
                on_retry(failures, e, delay)
            sleep(delay)
