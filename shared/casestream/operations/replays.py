"""Replay runs read model: recent runs of ``casestream replay`` with progress and ETA.

Source: ``replay_history`` in each projection database (written by the replay, see
``casestream.replay.history``). Progress = events read / (read + remaining), where remaining
is the messages between the run's positions and its targets when the row was last updated;
the rate is events read per second since the start (``updated_at - started_at``) and the ETA
is remaining / rate, counted from ``updated_at``.

:class:`ReplayRunsCache` keeps a page that refreshes every few seconds from opening a
connection per projection database each time: it reads again at most every ``idle_s``
seconds while no run is running, and at most every ``running_s`` while one is (the replay
updates its row at most once a second, ``casestream.replay.history.UPDATE_INTERVAL_S``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

__all__ = ["ReplayRun", "ReplayRuns", "ReplayRunsCache", "read_replay_runs", "load_replay_runs"]

_COLUMNS = ("run_id::text, projection, mode, state, started_at, updated_at, finished_at,"
            " events_read, events_applied, events_remaining, error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRun:
    """One row of ``replay_history`` (times timezone-aware; counters in events/messages)."""

    run_id: str
    projection: str
    mode: str
    state: str  # running | finished | failed
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    events_read: int = 0
    events_applied: int = 0
    events_remaining: int = 0
    error: str | None = None

    @property
    def fraction(self) -> float | None:
        """Share of the range read, 0.0-1.0 (1.0 once finished; None: nothing known yet)."""
        if self.state == "finished":
            return 1.0
        total = self.events_read + self.events_remaining
        return self.events_read / total if total else None

    @property
    def rate(self) -> float | None:
        """Events read per second from ``started_at`` to ``updated_at`` (None: no time passed)."""
        elapsed = (self.updated_at - self.started_at).total_seconds()
        return self.events_read / elapsed if elapsed > 0 else None

    def eta_s(self, now: datetime) -> float | None:
        """Seconds from ``now`` until a running run has read its remaining events at its rate
        so far (0 when overdue; None: not running, or no rate yet)."""
        rate = self.rate
        if self.state != "running" or not rate:
            return None
        due = self.updated_at + timedelta(seconds=self.events_remaining / rate)
        return max(0.0, (due - now).total_seconds())


@dataclass(frozen=True, slots=True)
class ReplayRuns:
    """Recent runs, newest first, and one line per database that could not be read."""

    runs: list[ReplayRun] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def read_replay_runs(conn: Any, limit: int = 20) -> list[ReplayRun]:
    """The ``limit`` newest runs in ``conn``'s database ([] when no replay ever ran there)."""
    if conn.execute("SELECT to_regclass('replay_history')").fetchone()[0] is None:
        return []
    rows = conn.execute(f"SELECT {_COLUMNS} FROM replay_history ORDER BY started_at DESC"
                        " LIMIT %s", (limit,)).fetchall()
    return [ReplayRun(run_id=r[0], projection=r[1], mode=r[2], state=r[3], started_at=r[4],
                      updated_at=r[5], finished_at=r[6], events_read=r[7], events_applied=r[8],
                      events_remaining=r[9], error=r[10]) for r in rows]


def load_replay_runs(dsns: Iterable[str], limit: int = 20, *,
                     timeout_s: float = 5.0) -> ReplayRuns:
    """The ``limit`` newest runs over the databases ``dsns`` (PostgreSQL URLs; duplicates read
    once). A database that cannot be reached within ``timeout_s`` seconds is reported in
    ``errors`` (without its password), never raised."""
    # lazy (start-up cost): the driver loads when runs are read
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    runs: list[ReplayRun] = []
    errors: list[str] = []
    for dsn in dict.fromkeys(dsns):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(timeout_s))) as conn:
                runs.extend(read_replay_runs(conn, limit))
        except psycopg.Error as e:
            try:
                info = conninfo_to_dict(dsn)
                where = f"{info.get('host', '?')}:{info.get('port', 5432)}/{info.get('dbname', '?')}"
            except psycopg.Error:
                where = "a replay database"
            errors.append(f"{where}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    runs.sort(key=lambda r: r.started_at, reverse=True)
    return ReplayRuns(runs[:limit], errors)


class ReplayRunsCache:
    """``load()`` (e.g. ``partial(load_replay_runs, dsns)``) read again only when its last
    answer is older than ``idle_s`` seconds, or ``running_s`` seconds when that answer holds
    a running run (or could not read a database: it may hold one); else the last answer.

    Call it as ``load``: ``cache() -> ReplayRuns``. Thread-safe (one read at a time);
    ``clock``: monotonic seconds. Raises what ``load`` raises (nothing is cached then).
    """

    def __init__(self, load: Callable[[], ReplayRuns], *, idle_s: float = 10.0,
                 running_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        if idle_s < 0 or running_s < 0:
            raise ValueError(f"idle_s and running_s must be >= 0 seconds, got {idle_s}, {running_s}")
        self._load, self._idle_s, self._running_s, self._clock = load, idle_s, running_s, clock
        self._lock = threading.Lock()
        self._last: ReplayRuns | None = None
        self._read_at = 0.0

    def __call__(self) -> ReplayRuns:
        with self._lock:
            now = self._clock()
            last = self._last
            if last is None or now - self._read_at >= self._max_age(last):
                last = self._last = self._load()
                self._read_at = now
            return last

    def _max_age(self, last: ReplayRuns) -> float:
        active = last.errors or any(r.state == "running" for r in last.runs)
        return self._running_s if active else self._idle_s
