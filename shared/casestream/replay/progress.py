"""Replay progress: counters and their rendering (pure apart from writing to a stream).

On a terminal one status line is redrawn in place (``\\r``) at most 5 times a second; when the
output is not a terminal (CI, logs) a plain line is written every ``interval_s`` seconds.
Each line: events done, events/s (since start), remaining lag (messages), ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(slots=True)
class Progress:
    """Counters of one replay (mutable; one writer)."""

    read: int = 0
    applied: int = 0
    stale: int = 0
    gaps: int = 0
    poison: int = 0
    unhandled: int = 0
    lag: int = 0
    started: float = 0.0

    def rate(self, now: float) -> float:
        """Messages read per second since ``started`` (0 before anything was read)."""
        elapsed = now - self.started
        return self.read / elapsed if elapsed > 0 and self.read else 0.0

    def eta_s(self, now: float) -> float | None:
        """Seconds until caught up at the current rate (None if unknown)."""
        r = self.rate(now)
        return self.lag / r if r > 0 else None


def fmt_eta(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``42s`` or ``?``."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def render(name: str, p: Progress, now: float) -> str:
    """One status line."""
    return (f"replay {name}: {p.read} events ({p.applied} applied, {p.stale} stale), "
            f"{p.rate(now):,.0f} events/s, lag {p.lag}, ETA {fmt_eta(p.eta_s(now))}")


class ProgressReporter:
    """Writes progress lines to ``stream``: in place on a TTY, plain lines otherwise."""

    def __init__(self, name: str, stream: TextIO, *, tty: bool | None = None,
                 interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.interval_s = 0.2 if self.tty else interval_s
        self.clock = clock
        self._last = 0.0
        self._width = 0

    def update(self, p: Progress, *, force: bool = False) -> None:
        """Show ``p`` if the interval elapsed (or ``force``)."""
        now = self.clock()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        line = render(self.name, p, now)
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A plain message on its own line (ends an in-place status line first)."""
        if self.tty and self._width:
            self.stream.write("\n")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()
