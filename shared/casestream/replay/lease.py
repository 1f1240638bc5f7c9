"""One replay per projection and database: a lease row, not a session lock.

A session advisory lock does not work behind a transaction pooler (PgBouncer
``pool_mode=transaction``): it stays on whichever server connection ran it, held for nobody,
and refuses every later replay. The lease is a row ``replay_lease (projection, holder,
expires_at)`` written in ordinary transactions: taken when absent or expired, renewed every
``ttl_s / 3`` by a thread on its own connection, deleted at the end. A replay that finds the
row held watches it: renewed meanwhile, the holder is alive and the replay is refused; not
renewed, the holder died (SIGKILL leaves the row behind) and the lease is taken once it
expired, at most ``ttl_s`` later. Every renewal and the release check that the row is still
this holder's; a lost lease raises :class:`ReplayError`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import psycopg

from casestream.replay.errors import ReplayError

log = logging.getLogger(__name__)

LEASE_DDL = """
CREATE TABLE IF NOT EXISTS replay_lease (
    projection text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
"""

_TAKE = """
INSERT INTO replay_lease AS l (projection, holder, expires_at)
VALUES (%(p)s, %(h)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (projection) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now()
RETURNING holder
"""


class ReplayLease:
    """The lease of ``projection`` in the database ``dsn`` for ``ttl_s`` seconds (> 0),
    renewed in the background while held.

    Raises:
        ReplayError: from :meth:`acquire` when another replay holds it (with its expiry), from
            :meth:`check` and :meth:`release` when it was lost (expired and taken, or deleted).
    """

    def __init__(self, dsn: str, projection: str, *, ttl_s: float = 15.0) -> None:
        if not ttl_s > 0:
            raise ReplayError(f"replay lease ttl_s={ttl_s!r}: must be > 0 seconds")
        self.dsn, self.projection, self.ttl_s = dsn, projection, float(ttl_s)
        self.holder = f"{uuid.uuid4()}"
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None, connect_timeout=10)

    def acquire(self) -> None:
        """Take the lease (waiting out a holder that stopped renewing) and start renewing it."""
        with self._connect() as conn:
            conn.execute(LEASE_DDL)
            seen = None
            while conn.execute(_TAKE, {"p": self.projection, "h": self.holder,
                                       "ttl": self.ttl_s}).fetchone() is None:
                row = conn.execute("SELECT expires_at, now() FROM replay_lease WHERE projection = %s",
                                   (self.projection,)).fetchone()
                if row is None:
                    continue  # released meanwhile
                if seen is not None and row[0] > seen:
                    raise ReplayError(f"another replay of {self.projection} is running on this "
                                      f"database (its lease, renewed, runs until {row[0].isoformat()})")
                seen = row[0]
                left = (row[0] - row[1]).total_seconds()
                time.sleep(min(max(left, 0.0) + 0.05, self.ttl_s / 3 + 0.5))
        self._thread = threading.Thread(target=self._renew_loop, name=f"replay-lease-{self.projection}",
                                        daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while not self._stop.wait(self.ttl_s / 3):
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = self._connect()
                    cur = conn.execute(
                        "UPDATE replay_lease SET expires_at = now() + make_interval(secs => %s)"
                        " WHERE projection = %s AND holder = %s", (self.ttl_s, self.projection, self.holder))
                    if cur.rowcount != 1:
                        self.lost = "the lease row is another holder's or gone"
                        return
                except psycopg.Error as e:  # the next round retries; the row may expire meanwhile
                    log.warning("replay %s: lease renewal failed: %s", self.projection, e)
        finally:
            if conn is not None:
                conn.close()

    def check(self) -> None:
        """Raise ReplayError if the lease was lost (call before each commit of replay state)."""
        if self.lost is not None:
            raise ReplayError(f"replay of {self.projection} lost its lease ({self.lost}); "
                              "another replay may be running: stopped")

    def release(self) -> None:
        """Stop renewing and delete the row; raises ReplayError if it was not this holder's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._connect() as conn:
            cur = conn.execute("DELETE FROM replay_lease WHERE projection = %s AND holder = %s",
                               (self.projection, self.holder))
            if cur.rowcount != 1:
                raise ReplayError(f"replay of {self.projection}: its lease was lost before release "
                                  "(expired and taken by another replay, or deleted)")
