"""The relay's SQL on the ``outbox`` table: claim a batch, record outcomes, retention, stats.

Claim (no watermark, so a late commit is never skipped): every *pending* row of a shard
this instance leases, whose backoff is over, and whose aggregate has no earlier row that
is failed or still backing off — in ``seq`` order. Rows of one aggregate are in one shard
(``hashtext(aggregateid) & 31``), so exactly one relay instance produces them, in order.

An earlier row of the same aggregate that is pending and due is in the same batch,
ahead of the later one (it has a smaller ``seq``), so the held-back check only needs
rows that have failed at least once: the partial index ``outbox_blocking_idx`` holds
exactly those and stays tiny in normal operation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg

__all__ = ["OutboxRow", "OutboxStats", "Delivered", "Fence", "claim", "mark_outcomes", "delete_published", "stats",
           "has_claim_floor", "claim_floor", "seq_high_water", "outbox_writers", "any_running",
           "advance_claim_floor", "xmin_horizon_age_s"]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One claimed row: what the relay needs to produce it (``id`` as canonical text)."""

    id: str
    aggregatetype: str
    aggregateid: str
    type: str
    payload: bytes
    event_version: int | None
    traceparent: str | None
    correlation_id: str | None
    attempts: int
    seq: int


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """Table-wide counts: ``pending`` and ``failed`` rows; ``oldest_pending_age_s`` (0 if none)."""

    pending: int
    failed: int
    oldest_pending_age_s: float


_CLAIM = """
SELECT o.id::text, o.aggregatetype, o.aggregateid, o.type, o.payload, o.event_version,
       o.traceparent, o.correlation_id, o.attempts, o.seq
FROM outbox o
WHERE o.status = 'pending'
  AND o.seq >= (SELECT f.seq FROM outbox_claim_floor f)
  AND o.next_attempt_at <= now()
  AND o.shard = ANY(%(shards)s::smallint[])
  AND o.seq <> ALL(%(inflight)s::bigint[])
  AND o.aggregateid <> ALL(%(busy)s::text[])
  AND NOT EXISTS (
        SELECT 1 FROM outbox e
        WHERE e.aggregateid = o.aggregateid AND e.aggregatetype = o.aggregatetype
          AND e.seq < o.seq
          AND (e.status = 'failed' OR (e.status = 'pending' AND e.attempts > 0))
          AND (e.status = 'failed' OR e.next_attempt_at > now()))
ORDER BY o.seq
LIMIT %(limit)s
"""
_CLAIM_FROM_START = _CLAIM.replace("(SELECT f.seq FROM outbox_claim_floor f)", "0")


def claim(
    conn: psycopg.Connection, shards: Iterable[int], limit: int, *, in_flight: Sequence[int] = (),
    busy_aggregates: Sequence[str] = (), stored_floor: bool = False,
) -> list[OutboxRow]:
    """Return up to ``limit`` publishable rows of ``shards``, in ``seq`` order.

    Read-only (no row locks): the shard lease is what makes this instance the only
    producer of these rows. The caller passes only shards whose lease is certainly
    valid (:meth:`LeaseManager.valid`: renewed less than 0.9 x lease ago by the local
    monotonic clock). The shard list is a parameter rather than a join with the lease
    table so that the planner walks ``outbox_pending_idx`` in ``seq`` order and stops
    after ``limit`` rows instead of sorting every pending row.

    ``in_flight`` lists the ``seq`` of rows not to claim again: those of a delivered
    batch the bookkeeping thread is still marking and those of open batches (produced,
    reports outstanding). ``busy_aggregates`` lists the ``aggregateid`` of open batches:
    none of their rows is claimed, so a later event never overtakes an earlier one that
    may still fail. ``in_flight`` is an exclusion list, not a ``seq >`` watermark: a row
    below the previous batch that committed late must still come first for its
    aggregate. The statement is never
    server-prepared (``prepare=False``) so PostgreSQL plans it with the array's values
    and hashes the ``<> ALL`` list (PostgreSQL 15+).

    ``stored_floor``: start the index scan at ``outbox_claim_floor.seq`` (no pending row has
    a smaller ``seq``, :func:`advance_claim_floor`) instead of walking the entries of rows
    published since the oldest snapshot still open, which neither vacuum nor the index's
    dead-entry hints can remove while that snapshot lives. Read in the same statement, so a
    re-drive that lowered the floor is seen together with the rows it made pending.
    """
    with conn.cursor() as cur:
        cur.execute(_CLAIM if stored_floor else _CLAIM_FROM_START,
                    {"shards": sorted(shards), "limit": limit, "inflight": list(in_flight),
                     "busy": list(busy_aggregates)}, prepare=False)
        return [OutboxRow(*r) for r in cur.fetchall()]


_MARK_PUBLISHED = """
UPDATE outbox o
SET status = 'published', published_at = to_timestamp(d.ts_ms / 1000.0),
    kafka_partition = d.p, kafka_offset = d.off, last_error = NULL
FROM unnest(%(ids)s::uuid[], %(ts)s::bigint[], %(p)s::int[], %(off)s::bigint[]) AS d(id, ts_ms, p, off)
WHERE o.id = d.id AND o.status = 'pending' AND o.shard = ANY(%(shards)s::smallint[])
"""

_DELETE_PUBLISHED = """
DELETE FROM outbox o
WHERE o.id = ANY(%(ids)s::uuid[]) AND o.shard = ANY(%(shards)s::smallint[])
"""

_MARK_RETRY = """
UPDATE outbox o
SET attempts = o.attempts + 1,
    next_attempt_at = now() + d.delay_s * interval '1 second',
    last_error = d.err
FROM unnest(%(ids)s::uuid[], %(delay)s::float8[], %(err)s::text[]) AS d(id, delay_s, err)
WHERE o.id = d.id AND o.status = 'pending' AND o.shard = ANY(%(shards)s::smallint[])
"""

_MARK_FAILED = """
UPDATE outbox o
SET status = 'failed', attempts = o.attempts + 1, last_error = d.err
FROM unnest(%(ids)s::uuid[], %(err)s::text[]) AS d(id, err)
WHERE o.id = d.id AND o.status = 'pending' AND o.shard = ANY(%(shards)s::smallint[])
"""

_FENCE = """
SELECT coalesce(array_agg(l.shard), '{}') FROM outbox_relay_lease l
JOIN unnest(%(shards)s::smallint[], %(epochs)s::bigint[]) AS h(shard, epoch)
  ON l.shard = h.shard AND l.epoch = h.epoch
WHERE l.locked_by = %(owner)s
"""

_FENCED_ROWS = """
SELECT count(*) FROM outbox WHERE id = ANY(%(ids)s::uuid[]) AND shard <> ALL(%(shards)s::smallint[])
"""

ALL_SHARDS = list(range(32))


@dataclass(frozen=True, slots=True)
class Delivered:
    """A confirmed delivery: row id (text), Kafka timestamp (ms), partition, offset."""

    id: str
    timestamp_ms: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Fence:
    """The leases a batch was claimed under: ``owner`` (``outbox_relay_lease.locked_by``) and
    the ``(shard, epoch)`` pairs it held then (:meth:`LeaseManager.fence`)."""

    owner: str
    shards: Sequence[int]
    epochs: Sequence[int]


def mark_outcomes(
    conn: psycopg.Connection,
    *,
    delivered: Sequence[Delivered],
    retry: Sequence[tuple[str, float, str]],
    failed: Sequence[tuple[str, str]],
    delete_published: bool,
    fence: Fence | None = None,
) -> int:
    """Record a batch's outcomes in ONE transaction; return the rows refused by ``fence``.

    Args:
        delivered: rows whose delivery report had no error → ``published`` (or deleted
            when ``delete_published``).
        retry: ``(id, delay_s, reason)`` → ``attempts+1``, ``next_attempt_at=now()+delay``.
        failed: ``(id, reason)`` → ``status='failed'``.
        fence: the leases the batch was claimed under. Rows of a shard whose lease row no
            longer has that owner and epoch (taken over by another instance while this one
            was paused or cut off) are left untouched; ``None`` (tools, benches) changes
            rows of every shard.

    Only rows still ``pending`` change, so a late bookkeeping by a relay that lost its
    lease cannot undo another instance's outcome; the fence keeps it from writing an
    outcome (a retry's backoff, ``failed``) over rows the new owner is publishing.
    """
    ids = [d.id for d in delivered] + [r[0] for r in retry] + [f[0] for f in failed]
    refused = 0
    with conn.transaction():
        with conn.cursor() as cur:
            shards: list[int] = ALL_SHARDS
            if fence is not None:
                shards = list(cur.execute(_FENCE, {"shards": list(fence.shards), "epochs": list(fence.epochs),
                                                   "owner": fence.owner}).fetchone()[0])
                if len(shards) < len(fence.shards) and ids:
                    refused = cur.execute(_FENCED_ROWS, {"ids": ids, "shards": shards}).fetchone()[0]
            if delivered:
                if delete_published:
                    cur.execute(_DELETE_PUBLISHED, {"ids": [d.id for d in delivered], "shards": shards})
                else:
                    cur.execute(_MARK_PUBLISHED, {
                        "ids": [d.id for d in delivered], "ts": [d.timestamp_ms for d in delivered],
                        "p": [d.partition for d in delivered], "off": [d.offset for d in delivered],
                        "shards": shards})
            if retry:
                cur.execute(_MARK_RETRY, {"ids": [r[0] for r in retry], "delay": [r[1] for r in retry],
                                          "err": [r[2] for r in retry], "shards": shards})
            if failed:
                cur.execute(_MARK_FAILED, {"ids": [f[0] for f in failed], "err": [f[1] for f in failed],
                                           "shards": shards})
    return refused


_DELETE_OLD = """
DELETE FROM outbox WHERE id IN (
    SELECT o.id FROM outbox o
    WHERE o.status = 'published' AND o.published_at < now() - %(keep)s * interval '1 second'
      AND o.shard IN (SELECT l.shard FROM outbox_relay_lease l
                      WHERE l.locked_by = %(owner)s AND l.locked_until > now())
    ORDER BY o.published_at
    LIMIT %(limit)s)
"""


def delete_published(conn: psycopg.Connection, owner: str, keep_s: float, limit: int) -> int:
    """Delete up to ``limit`` published rows older than ``keep_s`` in ``owner``'s shards."""
    with conn.transaction():
        cur = conn.execute(_DELETE_OLD, {"keep": keep_s, "owner": owner, "limit": limit})
        return cur.rowcount


def stats(conn: psycopg.Connection, *, stored_floor: bool = False) -> OutboxStats:
    """Count pending and failed rows and the age of the oldest pending row (seconds);
    ``stored_floor``: scan pending rows from ``outbox_claim_floor`` on (see :func:`claim`)."""
    floor = "(SELECT f.seq FROM outbox_claim_floor f)" if stored_floor else "0"
    row = conn.execute(
        f"""SELECT (SELECT count(*) FROM outbox WHERE status = 'pending' AND seq >= {floor}),
                  (SELECT count(*) FROM outbox WHERE status = 'failed'),
                  (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)
                     FROM (SELECT created_at FROM outbox WHERE status = 'pending' AND seq >= {floor}
                           ORDER BY seq LIMIT 100) AS oldest)"""
    ).fetchone()
    assert row is not None
    return OutboxStats(pending=int(row[0]), failed=int(row[1]), oldest_pending_age_s=float(row[2]))


def has_claim_floor(conn: psycopg.Connection) -> bool:
    """Whether the ``outbox_claim_floor`` table exists (``casestream_outbox_004_claim_floor``)."""
    row = conn.execute("SELECT to_regclass('outbox_claim_floor') IS NOT NULL").fetchone()
    return bool(row and row[0])


def claim_floor(conn: psycopg.Connection) -> tuple[int, int]:
    """The stored claim floor and its generation: ``(seq, generation)``; no pending row has a
    smaller ``seq``; every change of the row raises ``generation``."""
    row = conn.execute("SELECT seq, generation FROM outbox_claim_floor").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def seq_high_water(conn: psycopg.Connection) -> int:
    """The largest ``seq`` handed out so far (0 if none): the identity sequence's last value."""
    row = conn.execute("SELECT coalesce(pg_sequence_last_value("
                       "pg_get_serial_sequence('outbox', 'seq')::regclass), 0)").fetchone()
    return int(row[0]) if row else 0


def outbox_writers(conn: psycopg.Connection) -> list[str]:
    """Virtual transaction ids (``pg_locks.virtualtransaction``) of the other transactions
    holding ``RowExclusiveLock`` on ``outbox``, prepared ones included. A transaction takes
    that lock (when its statement is parsed or its cached plan locked) before it draws a
    ``seq`` and keeps it until it ends, so every row numbered before this call belongs to
    a transaction listed here or already ended."""
    row = conn.execute(
        "SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks "
        "WHERE locktype = 'relation' AND relation = 'outbox'::regclass "
        "AND mode = 'RowExclusiveLock' AND granted AND pid IS DISTINCT FROM pg_backend_pid()").fetchone()
    return list(row[0]) if row else []


def any_running(conn: psycopg.Connection, vxids: Sequence[str]) -> bool:
    """Whether a transaction of ``vxids`` (:func:`outbox_writers`) still holds any lock:
    each holds its own virtual transaction id lock until it commits or aborts."""
    if not vxids:
        return False
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE virtualtransaction = ANY(%s))",
                       (list(vxids),)).fetchone()
    return bool(row and row[0])


_ADVANCE_FLOOR = """
WITH n AS (
    SELECT coalesce((SELECT o.seq FROM outbox o
                     WHERE o.status = 'pending' AND o.seq >= %(old)s AND o.seq <= %(upto)s
                     ORDER BY o.seq LIMIT 1), %(upto)s + 1) AS seq)
UPDATE outbox_claim_floor f
SET seq = n.seq, generation = f.generation + 1, advanced_at = now()
FROM n
WHERE f.seq = %(old)s AND f.generation = %(generation)s AND n.seq > f.seq
RETURNING f.seq
"""


def advance_claim_floor(conn: psycopg.Connection, old: tuple[int, int], upto: int) -> int | None:
    """Raise the claim floor from ``old`` (``(seq, generation)`` as :func:`claim_floor` read
    it) to the lowest pending ``seq`` at most ``upto`` (``upto + 1`` if none); return the new
    floor, or None when there is nothing to raise (the row is not written: no dead version
    per step while a horizon is held) or the row changed since ``old`` was read (a re-drive
    lowered it, or another relay advanced it): the caller reads it again.

    The caller guarantees that no row with ``seq <= upto`` can still commit: ``upto`` is
    :func:`seq_high_water` read before :func:`outbox_writers`, and none of those writers is
    running any more (:func:`any_running`). A snapshot held open (a report, ``pg_dump``) does
    not hold the floor back; a transaction that wrote to the outbox and stays open does (it
    may still commit rows below).
    """
    if upto < old[0]:
        return old[0]
    with conn.transaction():
        row = conn.execute(_ADVANCE_FLOOR, {"old": old[0], "generation": old[1], "upto": upto}).fetchone()
    return int(row[0]) if row else None


_XMIN_AGE = """
SELECT greatest(
    (SELECT max(extract(epoch FROM now() - xact_start)) FROM pg_stat_activity
     WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
       AND (datname = current_database() OR backend_xid IS NOT NULL)),
    (SELECT max(extract(epoch FROM now() - prepared)) FROM pg_prepared_xacts), 0)
"""


def xmin_horizon_age_s(conn: psycopg.Connection) -> float:
    """Age (seconds) of the oldest transaction holding this database's vacuum horizon
    (``xmin``) back; 0 if none. Counted: open transactions with a ``backend_xmin`` in
    ``pg_stat_activity`` of this database, those of any database that hold a transaction id
    (every snapshot of the cluster waits for them), and prepared transactions. A read-only
    snapshot in another database holds only that one (PostgreSQL 14+). A role without
    ``pg_read_all_stats`` sees ``xact_start`` only for its own role's sessions."""
    row = conn.execute(_XMIN_AGE).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def cdc_publishes(conn: psycopg.Connection) -> bool:
    """Whether ``outbox_publisher`` says CDC publishes this outbox (False without the table:
    a database migrated before it existed is the relay's)."""
    row = conn.execute("SELECT to_regclass('outbox_publisher') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return False
    row = conn.execute("SELECT publisher = 'cdc' FROM outbox_publisher").fetchone()
    return bool(row and row[0])
