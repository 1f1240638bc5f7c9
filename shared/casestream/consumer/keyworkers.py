"""Worker threads of a key-parallel consumer: each applies units of a :class:`KeyScheduler`.

Driver module (psycopg pool). ``key_concurrency`` threads, each with its own connection from
the runtime's pool and its own :class:`~casestream.consumer.batch.BatchProcessor` (the guard
cache is shared), take units under one lock, apply each in one transaction
(``BatchProcessor.process``: inbox, guard, handlers, dead letters exactly as for a poll batch)
and report the offsets it applied and the cuts it made. A worker takes its next unit as soon
as it has finished one; the runtime's loop only fetches, queues, seeks and commits.

Unit size and wake-ups: while other units run, a worker starts a unit only of at least
``MIN_UNIT`` entries (the queue divided by the workers when that is more); with fewer queued,
one worker lingers up to ``LINGER_S`` for more, then takes what there is, and the others sleep
until the runtime queues entries or a unit ends. Every unit costs a transaction and its inbox,
guard and retry statements whatever its size, and every wake-up costs a thread switch under
the GIL; units of one or two events at 64 workers made the process CPU-bound (one core) at a
fifth of the rate the handlers' waits allow. With no unit running a worker starts at once on
whatever is queued, so a lone event waits for nobody.

Coroutine handlers (``async def``, see ``casestream.handlers``): the runtime starts
:func:`worker_threads` threads instead, one per ``CALLS_PER_WORKER`` calls, and each thread's
fast path awaits its unit's calls concurrently, one chain per aggregate
(``casestream.consumer.batch_fast``), on the consumer's one
:class:`~casestream.consumer.handlerloop.HandlerLoop`: ``key_concurrency`` calls wait at once
over all units, and a unit in its database round trips leaves its calls to the others.

A unit that fails as a whole (database down, dead-letter delivery failed) is rolled back and
its partitions are re-fetched from its first offsets after the consumer's exponential backoff
(``retry``, counted over consecutive failed units), as a failed poll batch is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from casestream.consumer.batch import TP, BatchProcessor, Decoded
from casestream.consumer.failures import connection_broken
from casestream.consumer.keyparallel import Entry, KeyScheduler
from casestream.retry import RetryPolicy

log = logging.getLogger("casestream.consumer")

MIN_UNIT = 32  # entries a unit holds at least while other units run (fewer only after LINGER_S)
LINGER_S = 0.01  # s one worker waits for MIN_UNIT entries before taking fewer
CALLS_PER_WORKER = 8  # key_concurrency per worker thread with coroutine handlers (units in flight)


def worker_threads(concurrency: int, coroutines: bool) -> int:
    """Worker threads for ``key_concurrency`` = ``concurrency``: one per call for plain
    handlers; with coroutine handlers one per ``CALLS_PER_WORKER`` calls, the threads' units
    awaiting their calls on one shared event loop (a thread switch per event, under the GIL,
    costs more CPU than the event itself once dozens of threads wait)."""
    return -(-concurrency // CALLS_PER_WORKER) if coroutines else concurrency


class KeyWorkers:
    """``concurrency`` threads applying the units of one scheduler.

    Args:
        name: consumer name (thread names, logs).
        pool: ``psycopg_pool.ConnectionPool``; each thread holds one connection while it runs.
        make_processor: builds one BatchProcessor per thread.
        concurrency: number of threads = units in flight at most.
        max_unit: most entries per unit (one transaction).
        retry: backoff of failed units.
    """

    def __init__(self, name: str, pool: Any, make_processor: Callable[[], BatchProcessor], *,
                 concurrency: int, max_unit: int, retry: RetryPolicy) -> None:
        self.name = name
        self.pool = pool
        self.sched = KeyScheduler(concurrency, max_unit)
        self.processors = [make_processor() for _ in range(concurrency)]
        self._retry = retry
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the runtime waits here: room, no unit running
        self._work = threading.Condition(lock)  # idle workers wait here for a unit
        self._idle = 0  # workers waiting in ``_work``
        self._lingering = False  # one worker waits LINGER_S for a unit of MIN_UNIT entries
        self._min_unit = max(1, min(MIN_UNIT, max_unit))
        self._stopping = False
        self._abandoned = False  # shutdown gave up on the running units (abandon)
        self._busy: dict[int, tuple[Any, Any]] = {}  # thread index -> (connection, unit) running
        self._failures = 0
        #: seconds the workers spent applying units, summed over threads (utilisation =
        #: busy_s / (wall seconds x concurrency))
        self.busy_s = 0.0
        #: the error that ended a worker thread outside a unit (a defect): the runtime raises it
        self.crashed: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, args=(p, i), daemon=True,
                                          name=f"{name}.key{i}")
                         for i, p in enumerate(self.processors)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Let running units finish, then end the threads (queued entries are dropped: they
        are behind the committable offsets and fetched again). After :meth:`abandon` the
        threads of abandoned units are not waited for (a handler may never return)."""
        with self._cond:
            self._stopping = True
            self._work.notify_all()
            abandoned = self._abandoned
        for t in self._threads:
            t.join(0.0 if abandoned else None)

    # ------------------------------------------------------------------ runtime side

    def add(self, entries: list[Entry]) -> None:
        with self._cond:
            self.sched.add(entries)
            if self._idle:
                self._work.notify(min(self._idle, max(1, len(entries) // self._min_unit)))

    @property
    def queued(self) -> int:
        return self.sched.queued

    @property
    def inflight(self) -> int:
        return self.sched.inflight

    def rewinds(self) -> dict[TP, tuple[int, float]]:
        with self._cond:
            return self.sched.rewinds()

    def committable(self) -> dict[TP, int]:
        with self._cond:
            return self.sched.committable()

    def quiesce(self, timeout_s: float | None = None) -> bool:
        """Start no new units and wait for the running ones (rebalance, shutdown), at most
        ``timeout_s`` seconds (None: no limit); True when none runs any more."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self.sched.hold = True
            while self.sched.inflight and self.crashed is None and not self._abandoned:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return not self.sched.inflight

    def abandon(self) -> list[tuple[Any, Any]]:
        """Give up on the running units (shutdown past its grace): returns ``(connection,
        unit)`` of each; the caller ends their sessions. Their late outcomes are ignored
        (nothing of them becomes committable) and :meth:`quiesce` no longer waits."""
        with self._cond:
            self._abandoned = True
            self._stopping = True
            self._work.notify_all()
            self._cond.notify_all()
            return list(self._busy.values())

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def uncommitted(self) -> dict[TP, tuple[int, int]]:
        """Per partition, ``(committable offset, last fetched + 1)`` where records between
        them are not committed (running, queued, or applied past an unfinished one)."""
        with self._cond:
            return self.sched.uncommitted()

    def release(self) -> None:
        with self._cond:
            self.sched.hold = False
            self._work.notify_all()

    def forget(self, tps: set[TP]) -> None:
        """Partitions revoked or lost (call after :meth:`quiesce`)."""
        with self._cond:
            self.sched.forget(tps)
        for p in self.processors:
            p.forget(list(tps))

    def wait_room(self, limit: int, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the queue to fall below ``limit`` entries."""
        with self._cond:
            if self.sched.queued >= limit:
                self._cond.wait(timeout_s)

    # ------------------------------------------------------------------ worker threads

    def _next(self, done: Any = None, outcome: Any = None) -> Any:
        """Report the unit ``done`` (``outcome``: its BatchResult, or the delay in s after its
        failure) and take the next one, under one acquisition of the lock; None: stop."""
        with self._cond:
            if done is not None and self._abandoned:
                return None  # given up at shutdown: its outcome must not become committable
            if done is not None:
                if isinstance(outcome, float):
                    self.sched.failed(done, outcome)
                else:
                    self.sched.finish(done, outcome.commits, outcome.rewinds)
                self._cond.notify_all()  # the runtime: room in the queue, or none running
            sched = self.sched
            lingered = False
            while True:
                if self._stopping:
                    return None
                unit = sched.take(1 if lingered or not sched.inflight else self._min_unit)
                if unit is not None:
                    if self._idle and (sched.queued >= self._min_unit
                                       or (sched.queued and not self._lingering)):
                        self._work.notify()  # more may be ready (keys this unit released)
                    return unit
                self._idle += 1
                if sched.queued and not self._lingering and not sched.hold:
                    # Too few entries for a unit while others run: wait a little for more.
                    self._lingering = True
                    try:
                        self._work.wait(LINGER_S)
                    finally:
                        self._lingering = False
                    lingered = True
                else:
                    self._work.wait()
                    lingered = False
                self._idle -= 1

    def _run(self, processor: BatchProcessor, index: int) -> None:
        conn = None
        unit, outcome = None, None
        try:
            while (unit := self._next(unit, outcome)) is not None:
                t0 = time.perf_counter()
                try:
                    if conn is None:
                        conn = self.pool.getconn()
                        conn.autocommit = True  # transactions are explicit
                    self._busy[index] = (conn, unit)
                    outcome = processor.process(conn, Decoded(unit.entries))
                    self._failures = 0
                except Exception as e:  # noqa: BLE001 - the unit as a whole failed
                    if conn is not None and connection_broken(conn):
                        self._put(conn)
                        conn = None
                    self._failures += 1
                    outcome = float(self._retry.delay(min(self._failures, 30)))
                    if not self._abandoned:  # else its session was ended at shutdown
                        log.error("%s: unit of %d failed (%s: %s); rolled back, its partitions "
                                  "are fetched again in %.2f s", self.name, len(unit.entries),
                                  type(e).__name__, e, outcome)
                finally:
                    self._busy.pop(index, None)
                    self.busy_s += time.perf_counter() - t0
        except BaseException as e:  # noqa: BLE001 - reported to the runtime, which stops
            log.exception("%s: key worker thread failed", self.name)
            with self._cond:
                self.crashed = e
                self._cond.notify_all()
        finally:
            processor.close()  # the event loop of coroutine handlers
            if conn is not None:
                self._put(conn)

    def _put(self, conn: Any) -> None:
        try:
            give_back(self.pool, conn)
        except Exception:  # noqa: BLE001 - an abandoned unit returning after the pool closed
            if not self._abandoned:
                raise


def give_back(pool: Any, conn: Any) -> None:
    """Return a connection taken in autocommit mode to ``pool`` (autocommit off again, as the
    pool hands them out)."""
    try:
        if not conn.closed:
            conn.autocommit = False
    except Exception:  # noqa: BLE001
        pass
    pool.putconn(conn)


__all__ = ["KeyWorkers"]
