"""Deadline scheduler worker: fires due saga deadlines (several instances are safe).

Each round is one transaction on a pooled connection: claim up to ``batch`` due sagas with
``FOR UPDATE SKIP LOCKED`` (rows another scheduler or a handler holds are skipped), let the
engine retry the step or take its DEADLINE transition, write the saga, its history and its
outgoing events (outbox), commit. A crash before the commit changes nothing; the deadline is
still due and fires in the next round — firing is idempotent because a fired deadline is
cleared or moved in the same transaction that emits its events.

When a round fired a full batch the next round starts at once; otherwise the worker sleeps
``interval_s`` (or until stopped).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from casestream.outbox import OutboxWriter
from casestream.outbox import OutboxSink
from services.saga.adapters.postgres import PgSagaStore
from services.saga.application.orchestrator import Orchestrator

log = logging.getLogger(__name__)


class DeadlineScheduler:
    """Callable worker ``(stop: threading.Event) -> None`` for ``ServiceProcess.workers``.

    Args:
        pool: psycopg_pool ConnectionPool of the saga database.
        orchestrator: the orchestrator whose deadlines fire.
        outbox: the outbox writer (``append(conn, events)``).
        interval_s: pause between idle rounds, seconds.
        batch: sagas claimed per round.
    """

    def __init__(self, pool: Any, orchestrator: Orchestrator, outbox: OutboxWriter, *,
                 interval_s: float = 1.0, batch: int = 100):
        self.pool = pool
        self.orchestrator = orchestrator
        self.outbox = outbox
        self.interval_s = interval_s
        self.batch = batch

    def run_once(self) -> int:
        """One round in one transaction; returns how many deadlines fired."""
        with self.pool.connection() as conn, conn.transaction():
            return self.orchestrator.fire_due(PgSagaStore(conn), OutboxSink(self.outbox, conn),
                                              limit=self.batch)

    def __call__(self, stop: threading.Event) -> None:
        log.info("deadline scheduler started (every %.1f s, batch %d)", self.interval_s,
                 self.batch)
        while not stop.is_set():
            try:
                fired = self.run_once()
            except Exception:  # noqa: BLE001 - a failed round is retried next round
                log.exception("deadline round failed; retrying in %.1f s", self.interval_s)
                fired = 0
            if fired:
                log.info("fired %d saga deadline(s)", fired)
            if fired < self.batch:
                stop.wait(self.interval_s)
        log.info("deadline scheduler stopped")
