"""PostgreSQL under a request deadline: a pool wrapper that never waits past it.

:class:`DeadlinePool` has the ``connection()`` context manager of
``psycopg_pool.ConnectionPool`` (what the services' units of work and readers call).
Outside a request (no current deadline) it is the plain pool. Under a deadline
(``casestream.http.deadline``):

1. the checkout waits at most the time left (and never more than the pool's own
   ``timeout``): ``psycopg_pool.PoolTimeout`` when it runs out;
2. the transaction gets ``statement_timeout`` = the time left (``set_config(...,
   is_local => true)``, PostgreSQL docs §20.11: ends with the transaction, so a pooled
   connection never keeps it): PostgreSQL cancels a statement that runs past it;
3. a watchdog cancels whatever statement is running when the deadline itself passes
   (``Connection.cancel_safe``), so the statements of one request together cannot run
   past it; the commit happens inside the watched block.

The caller's ``conn.transaction()`` becomes a savepoint inside the transaction opened
here; the pool commits it when the block exits cleanly (rolls back otherwise).
Errors: :class:`~casestream.http.deadline.DeadlineExceeded` when no time is left before a
step; ``PoolTimeout`` / ``psycopg.errors.QueryCanceled`` (an ``OperationalError``) from
the driver, which the services already translate to "storage unavailable".
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from casestream.http.deadline import current_deadline

log = logging.getLogger(__name__)

CANCEL_TIMEOUT_S = 2.0


@dataclass(order=True, slots=True)
class _Alarm:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)
    lock: threading.Lock = field(compare=False, default_factory=threading.Lock)
    disarmed: bool = field(compare=False, default=False)


class Watchdog:
    """Runs an action at a monotonic instant unless disarmed first; one daemon thread."""

    def __init__(self, name: str = "casestream.deadline-watchdog") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[_Alarm] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def armed(self, at: float, action: Callable[[], None]) -> Iterator[None]:
        """Run ``action`` at ``at`` (``time.monotonic``) if the block is still running.

        On leaving the block the alarm is disarmed; an action already running is waited
        for, so it never acts on a connection after the block has given it back.
        """
        alarm = _Alarm(at, next(self._seq), action)
        with self._cond:
            heapq.heappush(self._heap, alarm)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with alarm.lock:
                alarm.disarmed = True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0].disarmed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0].at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                alarm = heapq.heappop(self._heap)
            with alarm.lock:
                if alarm.disarmed:
                    continue
                try:
                    alarm.action()
                except Exception:  # noqa: BLE001 - a failed cancel must not stop the watchdog
                    log.warning("deadline action failed", exc_info=True)


_WATCHDOG = Watchdog()


class DeadlinePool:
    """A ``ConnectionPool`` whose checkouts obey the current request deadline.

    Args:
        pool: the pool to draw from (also used as is by workers: no deadline there).
        watchdog: cancels statements at the deadline (default: one per process).
    """

    def __init__(self, pool: ConnectionPool[Any], watchdog: Watchdog | None = None) -> None:
        self.pool = pool
        self._watchdog = watchdog or _WATCHDOG

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction bounded by the deadline (module docstring).

        Raises:
            DeadlineExceeded: no time left before the checkout or before the first statement.
            psycopg_pool.PoolTimeout: no connection became free in the time left.
        """
        deadline = current_deadline()
        if deadline is None:
            with self.pool.connection(timeout) as conn:
                yield conn
            return
        wait = min(deadline.check("taking a database connection"),
                   self.pool.timeout if timeout is None else timeout)
        with self.pool.connection(wait) as conn:
            with self._watchdog.armed(deadline.at, lambda: _cancel(conn)):
                left_ms = max(1, int(deadline.check("the first statement") * 1000))
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(left_ms),))
                yield conn
                conn.commit()


def _cancel(conn: psycopg.Connection[Any]) -> None:
    log.info("request deadline passed: cancelling the running statement")
    conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)
