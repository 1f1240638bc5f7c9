"""Publishing the outbox by change data capture (Debezium): who publishes, how far CDC got,
and removing rows CDC has passed.

Tables (migration :data:`OUTBOX_PUBLISHER_MIGRATION`, part of ``OUTBOX_MIGRATIONS``):

``outbox_publisher``  one row: ``publisher`` = ``relay`` (default) | ``cdc``. The relay claims
                      nothing while it says ``cdc`` (``casestream.outbox.relay``); only
                      ``casestream outbox handover`` changes it.
``outbox_cdc_checkpoint``  ``(seq, lsn, taken_at)``: every outbox row with ``seq <= seq`` was
                      committed before WAL position ``lsn``.

How a checkpoint is taken (:func:`take_checkpoint`): ``LOCK TABLE outbox IN SHARE MODE``
waits for every transaction that inserted into the outbox to end (SHARE conflicts with the
ROW EXCLUSIVE lock of an INSERT) and holds new inserts back for the few milliseconds the
statement takes; under it ``max(seq)`` and ``pg_current_wal_insert_lsn()`` are read. So no row
at or below ``seq`` can commit later, and every such row's commit record lies before ``lsn``.
The lock is taken with ``lock_timeout`` (default 200 ms): behind a long writing transaction
the checkpoint is skipped rather than stalling every writer queued behind the lock.

A row is *passed* by CDC when a checkpoint covering it has ``lsn <=`` the replication slot's
``confirmed_flush_lsn``: Debezium confirms an LSN to the slot only after Kafka Connect
committed the source offset, which it does only for records the producer had acknowledged
(Connect's ``offset.flush.interval.ms``). The lag in bytes is
``pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)``. Debezium confirms the LSN of
the last change it streamed (and, with ``heartbeat.interval.ms``, of what its heartbeats
saw): on an idle outbox the slot may stay just below the newest checkpoint, so the last rows
written count as unconfirmed (and are kept) until the next write carries the slot past it.

Errors: :class:`CdcError` (a slot is missing, a handover precondition fails) and
``psycopg.Error`` from the statements.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from casestream import telemetry
from casestream.errors import CasestreamError
from casestream.outbox.writer import OUTBOX_PUBLISHER_DDL, OUTBOX_PUBLISHER_MIGRATION

__all__ = [
    "OUTBOX_PUBLISHER_DDL", "OUTBOX_PUBLISHER_MIGRATION", "PUBLISHERS", "CdcError", "CdcStatus",
    "Checkpoint", "CdcRetention", "cdc_status", "default_slot_name", "publisher", "set_publisher",
    "take_checkpoint", "delete_passed", "CDC_HEARTBEAT_TABLE", "CDC_HEARTBEAT_DDL",
]

log = logging.getLogger(__name__)

#: The values of ``outbox_publisher.publisher``.
PUBLISHERS = ("relay", "cdc")

#: One row the connector's ``heartbeat.action.query`` updates every heartbeat. The table is in
#: the publication, so the UPDATE streams through the slot (and is then dropped by
#: ``skipped.operations``): Debezium sees a fresh LSN and confirms it while the outbox is idle.
#: Without it pgoutput sends nothing for other tables' transactions and the slot keeps their
#: WAL until the next outbox write.
CDC_HEARTBEAT_TABLE = "casestream_cdc_heartbeat"
CDC_HEARTBEAT_DDL = f"""
CREATE TABLE IF NOT EXISTS {CDC_HEARTBEAT_TABLE} (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    beat_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {CDC_HEARTBEAT_TABLE} DEFAULT VALUES ON CONFLICT DO NOTHING;
"""

class CdcError(CasestreamError):
    """CDC of an outbox cannot be used or checked: the replication slot is missing, or a
    handover precondition does not hold (the message says which and what to do)."""


def default_slot_name(database: str) -> str:
    """The replication slot (and publication) name of a database's outbox connector:
    ``casestream_<database>_outbox`` (PostgreSQL slot names: lower case, digits, ``_``)."""
    safe = "".join(c if c.isalnum() else "_" for c in database.lower())
    return f"casestream_{safe}_outbox"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every outbox row with ``seq <= seq`` committed before WAL position ``lsn`` (text)."""

    seq: int
    lsn: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CdcStatus:
    """How far CDC got on one outbox.

    ``slot_exists``/``slot_active`` (a walsender streams from it), ``confirmed_lsn`` (None
    without a slot), ``lag_bytes`` (WAL written since the confirmed LSN), ``safe_wal_bytes``
    (WAL that may still be written before ``max_slot_wal_keep_size`` invalidates the slot,
    ``pg_replication_slots.safe_wal_size``; None when unlimited or no slot), ``passed_seq``
    (rows up to it are published for sure; 0 = none proven yet), ``unconfirmed`` (rows above
    it: published or not, CDC has not confirmed them yet) and ``oldest_unconfirmed_age_s``
    (seconds since the oldest of them was written; 0 when none).
    """

    slot: str
    slot_exists: bool
    slot_active: bool
    confirmed_lsn: str | None
    lag_bytes: int
    passed_seq: int
    unconfirmed: int
    oldest_unconfirmed_age_s: float
    safe_wal_bytes: int | None = None


def publisher(conn: psycopg.Connection[Any]) -> str:
    """``relay`` or ``cdc``: who publishes this outbox now (``relay`` when the table is absent)."""
    row = conn.execute("SELECT to_regclass('outbox_publisher') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return "relay"
    row = conn.execute("SELECT publisher FROM outbox_publisher").fetchone()
    return str(row[0]) if row else "relay"


def set_publisher(conn: psycopg.Connection[Any], value: str) -> None:
    """Set who publishes (in the caller's transaction).

    Raises:
        ValueError: ``value`` is not one of :data:`PUBLISHERS`.
    """
    if value not in PUBLISHERS:
        raise ValueError(f"publisher {value!r}: one of {', '.join(PUBLISHERS)}")
    conn.execute("INSERT INTO outbox_publisher (publisher) VALUES (%s) ON CONFLICT (singleton) "
                 "DO UPDATE SET publisher = excluded.publisher, changed_at = now()", (value,))


def take_checkpoint(conn: psycopg.Connection[Any], *, lock_timeout_ms: int = 200) -> Checkpoint | None:
    """Record a checkpoint (see the module docstring); None when the lock was not granted
    within ``lock_timeout_ms`` (try again later). Runs and commits its own transaction:
    ``conn`` must be idle, in autocommit mode or not."""
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
            conn.execute("LOCK TABLE outbox IN SHARE MODE")
            row = conn.execute(
                "INSERT INTO outbox_cdc_checkpoint (seq, lsn) "
                "SELECT coalesce(max(seq), 0), pg_current_wal_insert_lsn() FROM outbox "
                "ON CONFLICT (seq) DO UPDATE SET seq = excluded.seq "
                "RETURNING seq, lsn::text").fetchone()
    except psycopg.errors.LockNotAvailable:
        return None
    assert row is not None
    return Checkpoint(int(row[0]), str(row[1]))


_STATUS = """
WITH slot AS (
    SELECT confirmed_flush_lsn AS lsn, active, safe_wal_size FROM pg_replication_slots
    WHERE slot_name = %(slot)s AND database = current_database()),
passed AS (
    SELECT coalesce(max(c.seq), 0) AS seq FROM outbox_cdc_checkpoint c, slot
    WHERE c.lsn <= slot.lsn)
SELECT (SELECT count(*) FROM slot) > 0,
       coalesce((SELECT active FROM slot), false),
       (SELECT lsn::text FROM slot),
       coalesce((SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), lsn) FROM slot), 0)::bigint,
       (SELECT seq FROM passed),
       (SELECT count(*) FROM outbox o, passed WHERE o.seq > passed.seq),
       coalesce(extract(epoch FROM now() - (SELECT min(o.created_at) FROM outbox o, passed
                                            WHERE o.seq > passed.seq)), 0)::float8,
       (SELECT safe_wal_size FROM slot)
"""


def cdc_status(conn: psycopg.Connection[Any], slot: str) -> CdcStatus:
    """How far the replication slot ``slot`` got on this database's outbox."""
    row = conn.execute(_STATUS, {"slot": slot}).fetchone()
    assert row is not None
    return CdcStatus(slot=slot, slot_exists=bool(row[0]), slot_active=bool(row[1]),
                     confirmed_lsn=row[2], lag_bytes=int(row[3]), passed_seq=int(row[4]),
                     unconfirmed=int(row[5]), oldest_unconfirmed_age_s=max(0.0, float(row[6])),
                     safe_wal_bytes=None if row[7] is None else int(row[7]))


def delete_passed(conn: psycopg.Connection[Any], slot: str, *, keep_s: float, limit: int = 5000) -> int:
    """Delete up to ``limit`` outbox rows CDC has passed that are older than ``keep_s``
    seconds, and the checkpoints below the newest passed one; return the rows deleted."""
    st = cdc_status(conn, slot)
    if st.passed_seq <= 0:
        return 0
    with conn.transaction():
        cur = conn.execute(
            "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE seq <= %s "
            "AND created_at < now() - make_interval(secs => %s) ORDER BY seq LIMIT %s)",
            (st.passed_seq, keep_s, limit))
        conn.execute("DELETE FROM outbox_cdc_checkpoint WHERE seq < %s", (st.passed_seq,))
    return cur.rowcount


class CdcRetention:
    """The worker a service runs instead of the relay when CDC publishes its outbox: every
    ``interval_s`` it takes a checkpoint, deletes rows CDC passed more than ``keep_s`` ago
    (in batches of ``batch``) and refreshes :attr:`status` (what ``/metrics`` reports:
    ``outbox_cdc_lag_bytes``, ``outbox_cdc_unconfirmed_total``,
    ``outbox_cdc_oldest_unconfirmed_age_seconds``, ``outbox_cdc_slot_safe_wal_bytes`` when the
    server sets ``max_slot_wal_keep_size``).

    ``connect`` is a zero-argument callable returning a new autocommit psycopg connection.
    """

    def __init__(self, connect: Any, slot: str, *, interval_s: float = 5.0, keep_s: float = 3600.0,
                 batch: int = 5000) -> None:
        self._connect = connect
        self.slot = slot
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.batch = batch
        self.status: CdcStatus | None = None
        self.deleted_total = 0
        src = telemetry.sources()
        for metric, read in (
                ("outbox_cdc_lag_bytes", lambda st: st.lag_bytes),
                ("outbox_cdc_unconfirmed_total", lambda st: st.unconfirmed),
                ("outbox_cdc_oldest_unconfirmed_age_seconds", lambda st: st.oldest_unconfirmed_age_s)):
            src.add_gauge(metric, self._gauge(read))
        src.add_gauge("outbox_cdc_slot_safe_wal_bytes", self._safe_wal)
        src.add_gauge("outbox_cdc_deleted_total", lambda: {(("slot", self.slot),): float(self.deleted_total)})

    def _safe_wal(self) -> dict[tuple[tuple[str, str], ...], float]:
        st = self.status
        if st is None or st.safe_wal_bytes is None:
            return {}
        return {(("slot", self.slot),): float(st.safe_wal_bytes)}

    def _gauge(self, read: Any) -> Any:
        def sample() -> dict[tuple[tuple[str, str], ...], float]:
            st = self.status
            return {} if st is None else {(("slot", self.slot),): float(read(st))}
        return sample

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        """One round: checkpoint, delete what CDC passed, refresh :attr:`status`."""
        take_checkpoint(conn)
        while True:
            n = delete_passed(conn, self.slot, keep_s=self.keep_s, limit=self.batch)
            self.deleted_total += n
            if n < self.batch:
                break
        self.status = cdc_status(conn, self.slot)

    def run(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set; a database error is logged and retried next round."""
        conn: psycopg.Connection[Any] | None = None
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                self.run_once(conn)
            except psycopg.Error as e:
                log.warning("outbox CDC retention (slot %s): %s", self.slot, str(e).strip().splitlines()[0])
                if conn is not None:
                    conn.close()
                conn = None
            stop.wait(self.interval_s)
        if conn is not None:
            conn.close()
