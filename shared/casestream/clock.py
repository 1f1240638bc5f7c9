"""The clock: what an application layer asks for the current time.

Pure (stdlib). :class:`Clock` is the port: ``clock.now()`` (objects) or ``clock()``
(callables) return a timezone-aware UTC ``datetime``; :class:`SystemClock` answers both
ways, so one instance serves use cases written either way. Tests pass a fixed or stepping
clock instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock", "utc_now"]


def utc_now() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)


class Clock(Protocol):
    """``now()``: a timezone-aware UTC ``datetime``."""

    def now(self) -> datetime: ...


class SystemClock:
    """The system's clock: ``now()`` and ``clock()`` both return :func:`utc_now`."""

    __slots__ = ()

    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        return utc_now()

    def __call__(self) -> datetime:
        return utc_now()
