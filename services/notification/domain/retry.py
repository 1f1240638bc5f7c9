"""Bounded SMTP retry policy (pure): exponential backoff with a cap, then give up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPolicy:
    """How often and when a notice is re-tried after a transient SMTP failure.

    Attributes:
        max_attempts: SMTP attempts in total before the notice fails (>= 1).
        first_backoff: wait after the first failed attempt.
        max_backoff: cap of the doubling wait.
    """

    max_attempts: int = 5
    first_backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(seconds=30)

    def next_attempt_at(self, attempts_made: int, now: datetime) -> datetime | None:
        """When to try again after ``attempts_made`` failed attempts, or None to give up.

        Attempt n+1 waits ``min(first_backoff * 2 ** (n - 1), max_backoff)``.
        """
        if attempts_made >= self.max_attempts:
            return None
        return now + min(self.first_backoff * (2 ** (attempts_made - 1)), self.max_backoff)
