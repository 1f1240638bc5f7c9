"""Operator actions on one service database's outbox (what ``casestream outbox`` runs).

Each function opens its own connection to ``dsn`` (a PostgreSQL URL) and closes it::

    outbox_status(dsn)               pending / failed / oldest age / published / live relays
    list_rows(dsn, status, limit)    rows of one status, oldest first
    show_row(dsn, event_id)          one row with its payload bytes
    redrive(dsn, ids | None)         failed -> pending (attempts 0, due now), NOTIFY the relay
    discard(dsn, ids, reason)        failed -> discarded (reason appended to last_error)

A re-driven row is due at once and the ``NOTIFY`` on :data:`NOTIFY_CHANNEL` wakes the relay.
A discarded row stops holding back its aggregate's later events (which are then published
without it).

Errors: :class:`NoOutboxTable` (the database has no ``outbox`` table: the service emits
nothing), :class:`OutboxDatabaseError` (connection or query failed; the message is the
driver's first line).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from casestream.errors import CasestreamError
from casestream.outbox.cdc import CdcStatus, cdc_status, default_slot_name, publisher
from casestream.outbox.relay.store import has_claim_floor, stats
from casestream.outbox.writer import NOTIFY_CHANNEL

__all__ = ["OutboxDatabaseError", "NoOutboxTable", "OutboxStatus", "RelayMember", "OutboxRow",
           "ROW_STATUSES", "outbox_status", "list_rows", "show_row", "redrive", "discard"]

#: The values of ``outbox.status``.
ROW_STATUSES = ("failed", "pending", "published", "discarded")


class OutboxDatabaseError(CasestreamError):
    """The database did not answer, or a statement failed (message: the driver's first line)."""


class NoOutboxTable(OutboxDatabaseError):
    """The database has no ``outbox`` table (the service publishes nothing)."""


@dataclass(frozen=True, slots=True)
class RelayMember:
    """A live relay instance: its name, owner id and the shards it leases now."""

    name: str
    owner: str
    shards: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxStatus:
    """Counts of one outbox (``oldest_pending_age_s`` in seconds; 0 when nothing is pending).

    ``publisher`` is ``relay`` or ``cdc`` (``outbox_publisher``); under ``cdc`` every row
    stays ``pending`` (Debezium never updates rows), so ``cdc`` holds what matters instead:
    the replication slot's lag and the rows it has not confirmed yet."""

    pending: int
    failed: int
    oldest_pending_age_s: float
    published_retained: int
    relays: tuple[RelayMember, ...] = field(default=())
    publisher: str = "relay"
    cdc: CdcStatus | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxRow:
    """One row as ``list_rows`` gives it (``next_attempt_at`` None = due at once)."""

    id: uuid.UUID
    seq: int
    aggregatetype: str
    aggregateid: str
    type: str
    aggregate_version: int
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None


@contextmanager
def _connect(dsn: str, *, autocommit: bool = True) -> Iterator[psycopg.Connection[Any]]:
    try:
        with psycopg.connect(dsn, autocommit=autocommit, connect_timeout=5) as conn:
            yield conn
    except psycopg.errors.UndefinedTable as e:
        raise NoOutboxTable(f"no outbox table ({_first_line(e)})") from None
    except psycopg.Error as e:
        raise OutboxDatabaseError(_first_line(e)) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def outbox_status(dsn: str, *, slot: str | None = None) -> OutboxStatus:
    """Pending and failed rows, oldest pending age, published rows kept, live relays; with
    CDC publishing, the :class:`~casestream.outbox.cdc.CdcStatus` of replication slot
    ``slot`` (default ``casestream_<database>_outbox``).

    Raises:
        NoOutboxTable: the database has no outbox.
        OutboxDatabaseError: it did not answer.
    """
    with _connect(dsn) as conn:
        st = stats(conn)
        relays = conn.execute(
            "SELECT m.name, m.owner, count(l.shard) FILTER (WHERE l.locked_until > now()) "
            "FROM outbox_relay_member m LEFT JOIN outbox_relay_lease l ON l.locked_by = m.owner "
            "WHERE m.heartbeat_until > now() GROUP BY m.name, m.owner ORDER BY m.owner"
        ).fetchall()
        published = conn.execute(
            "SELECT count(*) FROM outbox WHERE status = 'published'").fetchone()
        who = publisher(conn)
        cdc = None
        if who == "cdc":
            db = conn.execute("SELECT current_database()").fetchone()
            cdc = cdc_status(conn, slot or default_slot_name(str(db[0]) if db else ""))
    return OutboxStatus(publisher=who, cdc=cdc, pending=st.pending, failed=st.failed,
                        oldest_pending_age_s=st.oldest_pending_age_s,
                        published_retained=int(published[0]) if published else 0,
                        relays=tuple(RelayMember(str(r[0]), str(r[1]), int(r[2])) for r in relays))


def list_rows(dsn: str, status: str = "failed", limit: int = 20) -> list[OutboxRow]:
    """Up to ``limit`` rows with ``status`` (one of :data:`ROW_STATUSES`), oldest first.

    Raises:
        ValueError: an unknown status.
        NoOutboxTable, OutboxDatabaseError: as :func:`outbox_status`.
    """
    if status not in ROW_STATUSES:
        raise ValueError(f"status {status!r}: one of {', '.join(ROW_STATUSES)}")
    with _connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, seq, aggregatetype, aggregateid, type, aggregate_version, attempts, "
            "CASE WHEN next_attempt_at = '-infinity' THEN NULL ELSE next_attempt_at END, "
            "last_error FROM outbox WHERE status = %s ORDER BY seq LIMIT %s",
            (status, limit),
        ).fetchall()
    return [OutboxRow(id=r[0], seq=r[1], aggregatetype=r[2], aggregateid=r[3], type=r[4],
                      aggregate_version=r[5], attempts=r[6], next_attempt_at=r[7],
                      last_error=r[8]) for r in rows]


_SHOW = """
SELECT id, aggregatetype, aggregateid, type, aggregate_version, event_version, tenant_id,
       correlation_id, traceparent, seq, shard, occurred_at, created_at, status, attempts,
       CASE WHEN next_attempt_at = '-infinity' THEN NULL ELSE next_attempt_at END AS next_attempt_at,
       last_error, published_at, kafka_partition, kafka_offset, payload
FROM outbox WHERE id = %s
"""


def show_row(dsn: str, event_id: uuid.UUID) -> dict[str, Any] | None:
    """Column name -> value of row ``event_id`` (``payload`` as bytes), None if absent.

    Raises:
        NoOutboxTable, OutboxDatabaseError: as :func:`outbox_status`.
    """
    with _connect(dsn) as conn:
        cur = conn.execute(_SHOW, (event_id,))
        row = cur.fetchone()
        names = [d.name for d in cur.description or []]
    if row is None:
        return None
    record = dict(zip(names, row))
    record["payload"] = bytes(record["payload"])
    return record


def redrive(dsn: str, ids: Sequence[uuid.UUID] | None) -> int:
    """Set failed rows (``ids``, or every failed row when None) back to pending with
    ``attempts = 0``, due now, and wake the relay; return how many rows changed.

    Raises:
        NoOutboxTable, OutboxDatabaseError: as :func:`outbox_status`.
    """
    with _connect(dsn, autocommit=False) as conn:
        with conn.transaction():
            if ids is None:
                cur = conn.execute("UPDATE outbox SET status = 'pending', attempts = 0, "
                                   "next_attempt_at = '-infinity' WHERE status = 'failed'")
            else:
                cur = conn.execute("UPDATE outbox SET status = 'pending', attempts = 0, "
                                   "next_attempt_at = '-infinity' "
                                   "WHERE status = 'failed' AND id = ANY(%s)", (list(ids),))
            changed = cur.rowcount
            # The relay's claim starts at outbox_claim_floor: below it nothing was pending,
            # and these rows are now. Same transaction, so no claim sees one without the other.
            if changed and has_claim_floor(conn):
                conn.execute("UPDATE outbox_claim_floor SET seq = 0, generation = generation + 1")
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    return changed


def discard(dsn: str, ids: Sequence[uuid.UUID], reason: str) -> int:
    """Give failed rows ``ids`` up for good (status ``discarded``, ``reason`` appended to
    ``last_error``) and wake the relay; return how many rows changed.

    Raises:
        NoOutboxTable, OutboxDatabaseError: as :func:`outbox_status`.
    """
    with _connect(dsn, autocommit=False) as conn:
        with conn.transaction():
            cur = conn.execute(
                "UPDATE outbox SET status = 'discarded', "
                "last_error = coalesce(last_error, '') || ' | discarded: ' || %s "
                "WHERE status = 'failed' AND id = ANY(%s)", (reason, list(ids)))
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    return cur.rowcount
