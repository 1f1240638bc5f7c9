"""The one backoff policy of casestream: bounded exponential backoff with jitter (stdlib only).

Every retry loop of the library and the suite uses :class:`RetryPolicy`: the outbox relay
(rows after a transient broker error, reconnects to PostgreSQL), the consumer runtime
(retryable handler failures, held events, failed batches) and the notification service
(SMTP attempts of a notice). All durations are seconds (``float``).

The delay before attempt ``n + 1`` after ``n`` failed attempts (``n >= 1``) is::

    base  = min(max_delay_s, initial_delay_s * multiplier ** (n - 1))
    delay = base * (1 - jitter * U),   U uniform in [0, 1)

so it grows exponentially, never exceeds ``max_delay_s`` and is shortened at random by up
to ``jitter * 100`` percent ("equal"/"proportional" jitter; ``jitter=1`` is "full jitter",
``jitter=0`` is deterministic). Retrying stops when ``max_attempts`` attempts have failed or
``max_elapsed_s`` seconds have passed since the first failure, whichever comes first
(``None``: no such bound).
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from casestream.errors import ConfigError

T = TypeVar("T")

__all__ = ["RetryPolicy", "call_with_retry"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in delay, attempts and elapsed time.

    Attributes:
        initial_delay_s: delay after the first failure, seconds (> 0).
        max_delay_s: upper bound of any delay, seconds (>= initial_delay_s).
        multiplier: growth factor per failed attempt (>= 1).
        jitter: fraction in [0, 1] by which a delay is randomly shortened.
        max_attempts: attempts allowed in total (first try included); ``None`` = unbounded.
        max_elapsed_s: seconds after the first failure past which no further attempt is made
            (> 0); ``None`` = unbounded.

    Raises:
        ConfigError: a bound out of range (on construction).
    """

    initial_delay_s: float = 0.1
    max_delay_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_attempts: int | None = None
    max_elapsed_s: float | None = None

    def __post_init__(self) -> None:
        if self.initial_delay_s <= 0:
            raise ConfigError(f"retry initial_delay_s must be > 0, got {self.initial_delay_s}")
        if self.max_delay_s < self.initial_delay_s:
            raise ConfigError(f"retry max_delay_s ({self.max_delay_s}) must be >= "
                              f"initial_delay_s ({self.initial_delay_s})")
        if self.multiplier < 1:
            raise ConfigError(f"retry multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry jitter must be in [0, 1], got {self.jitter}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1 or None, got {self.max_attempts}")
        if self.max_elapsed_s is not None and self.max_elapsed_s <= 0:
            raise ConfigError(f"retry max_elapsed_s must be > 0 or None, got {self.max_elapsed_s}")

    @property
    def bounded(self) -> bool:
        """True if ``max_attempts`` or ``max_elapsed_s`` ends the retries."""
        return self.max_attempts is not None or self.max_elapsed_s is not None

    def base_delay(self, failures: int) -> float:
        """Seconds before the next attempt after ``failures`` (>= 1) failures, without jitter.

        Raises:
            ValueError: ``failures < 1``.
        """
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures}")
        exponent = min(failures - 1, 1024)  # a float power overflows long before 2 ** 1024
        try:
            raw = self.initial_delay_s * self.multiplier**exponent
        except OverflowError:
            return self.max_delay_s
        return min(self.max_delay_s, raw)

    def delay(self, failures: int, *, rand: Callable[[], float] = _random.random) -> float:
        """Seconds before the next attempt after ``failures`` (>= 1) failures.

        ``rand`` returns a float in [0, 1) (a seeded ``random.Random().random`` makes tests
        reproducible). The result lies in ``[(1 - jitter) * base, base]``.
        """
        return self.base_delay(failures) * (1.0 - self.jitter * rand())

    def exhausted(self, attempts: int, elapsed_s: float = 0.0) -> bool:
        """True when ``attempts`` failed attempts reach ``max_attempts``, or ``elapsed_s``
        seconds since the first failure reach ``max_elapsed_s``."""
        if self.max_attempts is not None and attempts >= self.max_attempts:
            return True
        return self.max_elapsed_s is not None and elapsed_s >= self.max_elapsed_s


def call_with_retry(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    retryable: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``fn`` until it returns, retrying errors for which ``retryable(e)`` is true.

    Sleeps ``policy.delay(n)`` seconds after the n-th failure. Re-raises the last error when
    it is not retryable or when the policy is exhausted (attempts, or ``clock()`` seconds
    since the first failure). ``on_retry(failures, error, delay_s)`` is called before each
    sleep (logging, metrics).
    """
    failures = 0
    first_failure = 0.0
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified by the caller's predicate
            failures += 1
            now = clock()
            if failures == 1:
                first_failure = now
            if not retryable(e) or policy.exhausted(failures, now - first_failure):
                raise
            delay = policy.delay(failures)
            if on_retry is not None:
                on_retry(failures, e, delay)
            sleep(delay)
