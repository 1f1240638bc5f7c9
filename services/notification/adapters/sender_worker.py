"""Sender worker: sends pending notices, one transaction per notice (see
:mod:`services.notification.application.sender` for the exactly-once argument).

Wake-up: the worker LISTENs on ``notification_pending`` (NOTIFY sent by the handler's
insert, delivered at commit) and otherwise polls every ``interval_s`` (retries that became
due, notices recorded while the listener was reconnecting). Several workers (processes) are
safe: claims use ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from casestream.outbox import OutboxSink
from services.notification.adapters.postgres import WAKE_CHANNEL, PgNoticeStore
from services.notification.application.ports import Mailer
from services.notification.application.sender import NoticeSender
from services.notification.domain.notice import Notice

log = logging.getLogger(__name__)


class SenderWorker:
    """Callable worker ``(stop: threading.Event) -> None`` for ``ServiceProcess.workers``.

    Args:
        pool: psycopg_pool ConnectionPool of the notification database.
        dsn: the same database's URL, for the LISTEN connection.
        sender: the use case.
        mailer: the SMTP adapter.
        outbox: outbox writer (``append(conn, events)``).
        interval_s: poll interval when idle, seconds.
    """

    def __init__(self, pool: Any, dsn: str, sender: NoticeSender, mailer: Mailer, outbox: Any,
                 *, interval_s: float = 1.0):
        self.pool = pool
        self.dsn = dsn
        self.sender = sender
        self.mailer = mailer
        self.outbox = outbox
        self.interval_s = interval_s

    def run_once(self) -> Notice | None:
        """Send (or fail, or reschedule) one due notice in one transaction; None if none due."""
        with self.pool.connection() as conn, conn.transaction():
            return self.sender.send_next(PgNoticeStore(conn), self.mailer,
                                         OutboxSink(self.outbox, conn))

    def drain(self, stop: threading.Event | None = None) -> int:
        """Process due notices until none is due (or ``stop``); return how many were handled."""
        handled = 0
        while stop is None or not stop.is_set():
            if self.run_once() is None:
                break
            handled += 1
        return handled

    def __call__(self, stop: threading.Event) -> None:
        log.info("notice sender started (poll every %.1f s, wake-up on %s)", self.interval_s,
                 WAKE_CHANNEL)
        listener: psycopg.Connection | None = None
        while not stop.is_set():
            try:
                if listener is None or listener.closed:
                    listener = psycopg.connect(self.dsn, autocommit=True)
                    listener.execute(f"LISTEN {WAKE_CHANNEL}")
                self.drain(stop)
                self._wait(listener, stop)
            except Exception:  # noqa: BLE001 - a failed round is retried after a pause
                log.exception("notice sender round failed; retrying in %.1f s", self.interval_s)
                if listener is not None:
                    listener.close()
                    listener = None
                stop.wait(self.interval_s)
        if listener is not None:
            listener.close()
        log.info("notice sender stopped")

    def _wait(self, listener: psycopg.Connection, stop: threading.Event) -> None:
        """Until a NOTIFY arrives, ``interval_s`` passed, or ``stop`` (checked every 0.5 s)."""
        waited = 0.0
        while waited < self.interval_s and not stop.is_set():
            step = min(0.5, self.interval_s - waited)
            if any(True for _ in listener.notifies(timeout=step, stop_after=1)):
                return
            waited += step
