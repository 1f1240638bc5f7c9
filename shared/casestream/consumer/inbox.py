"""Inbox, version-guard and held-event tables in PostgreSQL (driver module: psycopg 3).

Three tables, one row set per consumer name, written in
the *same transaction* as the handlers' effects:

- ``consumer_inbox (consumer, event_id)`` — every event this consumer recorded (applied, or
  without a handler). A duplicate delivery finds its row and is a counted no-op. The row keeps
  ``payload_hash`` (:func:`payload_hash`) so a *different* message reusing a recorded event id
  is told from a redelivery (the runtime dead-letters it, reason ``reused_event_id``); rows
  written before the column existed have NULL there and are not compared. The insert has
  no ``ON CONFLICT``: two instances racing on the same event (e.g. during a rebalance) block on
  the primary key and the loser fails with ``UniqueViolation``, so a handler effect never commits
  twice.
- ``consumer_version_guard (consumer, aggregate_type, aggregate_id)`` — ``last_version`` recorded
  and the aggregate's state (``flowing`` | ``holding`` | ``parked``, see ``casestream.handlers.guard``).
  Per-message updates are optimistic (``WHERE last_version = expected``); the batch fast path
  writes a monotonic upsert (``flowing`` and below the new version). A mismatch raises
  :class:`GuardConflict` (retryable).
- ``consumer_held_event (consumer, event_id)`` — raw bytes of events waiting behind a version
  gap, so Kafka offsets can move past them and nothing is lost on restart.

``INBOX_DDL`` is idempotent; :func:`ensure_schema` runs it under an advisory lock, and only
when one of its objects is missing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from casestream.errors import RetryableError
from casestream.handlers.guard import AggregateState
from casestream.consumer.retries import RETRY_DDL

INBOX_DDL = """
CREATE TABLE IF NOT EXISTS consumer_inbox (
    consumer          text        NOT NULL,
    event_id          text        NOT NULL,
    event_type        text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    processed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS payload_hash text;
CREATE TABLE IF NOT EXISTS consumer_version_guard (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_version   bigint      NOT NULL,
    state          text        NOT NULL DEFAULT 'flowing'
                   CHECK (state IN ('flowing', 'holding', 'parked')),
    hold_deadline  timestamptz,
    parked_at      timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS consumer_version_guard_waiting
    ON consumer_version_guard (consumer) WHERE state <> 'flowing';
CREATE TABLE IF NOT EXISTS consumer_held_event (
    consumer          text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    topic             text        NOT NULL,
    partition         integer     NOT NULL,
    "offset"          bigint      NOT NULL,
    key               bytea,
    value             bytea       NOT NULL,
    header_names      text[]      NOT NULL DEFAULT '{}',
    header_values     bytea[]     NOT NULL DEFAULT '{}',
    timestamp_ms      bigint,
    attempts          integer     NOT NULL DEFAULT 0,
    first_failure     timestamptz,
    last_failure      timestamptz,
    last_error        text,
    next_attempt_at   timestamptz,
    held_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS consumer_held_event_aggregate
    ON consumer_held_event (consumer, aggregate_type, aggregate_id, aggregate_version);
"""

_DDL_LOCK = 0x63_73_69_6E  # "csin": advisory lock key serialising concurrent DDL runs


class GuardConflict(RetryableError):
    """The guard row changed under us (another instance recorded the aggregate concurrently)."""


@dataclass(slots=True)
class GuardRow:
    """In-memory copy of one guard row (mutable while a batch is planned)."""

    last_version: int
    state: AggregateState
    exists: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxEntry:
    """One inbox row to write."""

    event_id: str
    event_type: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    payload_hash: str | None = None


def payload_hash(event: Any) -> str:
    """SHA-256 (hex) of what makes an event *this* event besides its id: tenant, type, aggregate,
    aggregate version and payload (canonical JSON, sorted keys; values JSON cannot hold as
    their ``str``). Delivery metadata (``published_at``, ``traceparent``) is left out, so a
    redelivery or a republished outbox row hashes the same."""
    doc = [event.tenant_id, event.event_type, event.aggregate_type, event.aggregate_id,
           event.aggregate_version, event.payload]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _hash_of(e: Any) -> str | None:
    return e.payload_hash if isinstance(e, InboxEntry) else payload_hash(e)


class InboxRow(Protocol):
    """What an inbox row is written from: an :class:`InboxEntry` or an ``Envelope``."""

    @property
    def event_id(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def aggregate_type(self) -> str: ...
    @property
    def aggregate_id(self) -> str: ...
    @property
    def aggregate_version(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldEvent:
    """A stored event waiting behind a gap (raw bytes, decoded again when drained)."""

    event_id: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None
    attempts: int
    first_failure: Any
    last_failure: Any
    last_error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingAggregate:
    """A guard row not in state ``flowing``, as seen by the sweep."""

    aggregate_type: str
    aggregate_id: str
    last_version: int
    state: AggregateState
    expired: bool
    first_held: int | None
    first_held_due: bool


def _schema_objects(ddl: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Relations (tables, indexes) and ``(table, column)`` pairs that ``ddl`` creates."""
    relations = re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", ddl)
    columns = re.findall(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)", ddl)
    return relations, columns


_RELATIONS, _COLUMNS = _schema_objects(INBOX_DDL + RETRY_DDL)
_MISSING = """
SELECT (SELECT count(*) FROM unnest(%(rels)s::text[]) AS r(name) WHERE to_regclass(r.name) IS NULL)
     + (SELECT count(*) FROM unnest(%(tables)s::text[], %(cols)s::text[]) AS c(t, a)
        WHERE NOT EXISTS (SELECT 1 FROM pg_attribute
                          WHERE attrelid = to_regclass(c.t) AND attname = c.a AND NOT attisdropped))
"""


def ensure_schema(conn: Any) -> None:
    """Create the inbox/guard/held tables and the retry table (``casestream.consumer.retries``)
    if missing (idempotent; commits on ``conn``).

    When every table, index and column exists the DDL is not run: ``ALTER TABLE ... ADD
    COLUMN IF NOT EXISTS`` takes an ACCESS EXCLUSIVE lock and ``CREATE INDEX IF NOT EXISTS``
    a SHARE lock even when there is nothing to do, so a starting instance would wait for any
    open transaction on those tables (a paused instance's batch) and, queued for the lock,
    stall every other consumer of the database behind it (PostgreSQL "Explicit Locking").
    """
    with conn.transaction():
        missing = conn.execute(_MISSING, {"rels": _RELATIONS, "tables": [t for t, _ in _COLUMNS],
                                          "cols": [c for _, c in _COLUMNS]}).fetchone()[0]
    if not missing:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
        conn.execute(INBOX_DDL)
        conn.execute(RETRY_DDL)


# Lookups are written as LATERAL subqueries with LIMIT 1 (an optimisation fence) so that each
# key is one primary-key probe whatever the table size; a plain join lets the planner pick a
# hash join over every row of the consumer, which grows with the number of aggregates.
# (The inbox probe ``event_id = ANY(...)`` is an index condition on the primary key already.)
_KNOWN = "SELECT event_id FROM consumer_inbox WHERE event_id = ANY(%s) AND consumer = %s"
# Batch parameters travel as one JSON document (json_to_recordset): the C json encoder is
# several times cheaper in client CPU than psycopg's per-element text[] dumping.
_GUARDS = ("SELECT k.t, k.i, g.last_version, g.state"
           " FROM json_to_recordset(%s::json) AS k(t text, i text) CROSS JOIN LATERAL"
           " (SELECT last_version, state FROM consumer_version_guard"
           "  WHERE consumer = %s AND aggregate_type = k.t AND aggregate_id = k.i LIMIT 1) g")
_CLAIM = """
INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type, aggregate_id,
                            aggregate_version, payload_hash)
SELECT %s, x.e, x.t, x.a, x.i, x.v, x.h
FROM json_to_recordset(%s::json) AS x(e text, t text, a text, i text, v bigint, h text)
ON CONFLICT DO NOTHING
RETURNING event_id
"""
_ADVANCE = """
WITH guard AS (
    INSERT INTO consumer_version_guard AS g (consumer, aggregate_type, aggregate_id, last_version)
    SELECT %(c)s, y.t, y.i, y.n FROM json_to_recordset(%(guard)s::json) AS y(t text, i text, n bigint)
    ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE
    SET last_version = EXCLUDED.last_version, updated_at = now()
    WHERE g.state = 'flowing' AND g.last_version < EXCLUDED.last_version
    RETURNING 1
)
SELECT count(*) FROM guard
"""


def query_known(conn: Any, consumer: str, event_ids: Sequence[str]) -> Any:
    """Send the inbox lookup for ``event_ids``; read it with :func:`read_known` (pipeline-friendly)."""
    return conn.execute(_KNOWN, (list(event_ids), consumer))


def read_known(cur: Any) -> set[str]:
    """Result of :func:`query_known`."""
    return {r[0] for r in cur.fetchall()}


def query_guards(conn: Any, consumer: str, keys: Iterable[tuple[str, str]]) -> Any:
    """Send the guard lookup for ``keys``; read it with :func:`read_guards` (pipeline-friendly)."""
    doc = json.dumps([{"t": t, "i": i} for t, i in keys])
    return conn.execute(_GUARDS, (doc, consumer))


def read_guards(cur: Any) -> dict[tuple[str, str], GuardRow]:
    """Result of :func:`query_guards`."""
    return {(t, i): GuardRow(v, AggregateState(s)) for t, i, v, s in cur.fetchall()}


def claim_inbox(conn: Any, consumer: str, entries: Sequence[InboxRow]) -> Any:
    """Send one statement inserting inbox rows for ``entries`` where absent; read the ids it
    inserted with :func:`read_claimed` — the others were already recorded (duplicates).

    ``entries`` are :class:`InboxEntry` values or the envelopes themselves (any
    :class:`InboxRow`): the fast path passes envelopes, which saves building an
    ``InboxEntry`` per event (~1.5-3 µs each, on the batch's critical path).

    ``ON CONFLICT DO NOTHING``: a row another transaction is inserting concurrently makes this
    statement wait for it; if that transaction commits, the event counts as a duplicate here,
    if it rolls back, the row is ours. Used by the batch fast path, whose transaction is rolled
    back as a whole if any event of the batch needs per-message handling.
    """
    doc = json.dumps([{"e": e.event_id, "t": e.event_type, "a": e.aggregate_type,
                       "i": e.aggregate_id, "v": e.aggregate_version, "h": _hash_of(e)}
                      for e in entries])
    return conn.execute(_CLAIM, (consumer, doc))


def read_claimed(cur: Any) -> set[str]:
    """Result of :func:`claim_inbox`: the event ids newly recorded."""
    return {r[0] for r in cur.fetchall()}


def advance_batch(conn: Any, consumer: str,
                  updates: Sequence[tuple[str, str, int | None, int]]) -> tuple[Any, int]:
    """Send one statement creating/advancing guard rows: a monotonic upsert, one primary-key
    probe per aggregate, that writes a row only where it is ``flowing`` and below the new
    version. ``updates`` = (aggregate_type, aggregate_id, expected, new) as in
    :func:`advance_guards` (``expected`` is not compared here: two transactions applying the
    same events conflict on the inbox primary key). Returns (cursor, rows expected) for
    :func:`check_advanced`, to call after the (pipeline) sync.
    """
    doc = json.dumps([{"t": u[0], "i": u[1], "n": u[3]} for u in updates])
    return conn.execute(_ADVANCE, {"c": consumer, "guard": doc}), len(updates)


def check_advanced(sent: tuple[Any, int]) -> None:
    """Verify an :func:`advance_batch` result. Raises GuardConflict if a row was not written."""
    cur, want = sent
    got = cur.fetchone()[0]
    if got != want:
        raise GuardConflict(f"guard rows changed concurrently ({got} of {want} written)")


def known_event_ids(conn: Any, consumer: str, event_ids: Sequence[str]) -> set[str]:
    """The subset of ``event_ids`` already in ``consumer``'s inbox (one round trip)."""
    if not event_ids:
        return set()
    return read_known(query_known(conn, consumer, event_ids))


def recorded_hashes(conn: Any, consumer: str, event_ids: Sequence[str]) -> dict[str, str | None]:
    """``event_id -> payload_hash`` of the ``event_ids`` already in ``consumer``'s inbox (None:
    recorded before hashes were kept); one round trip."""
    if not event_ids:
        return {}
    cur = conn.execute("SELECT event_id, payload_hash FROM consumer_inbox"
                       " WHERE event_id = ANY(%s) AND consumer = %s", (list(event_ids), consumer))
    return {r[0]: r[1] for r in cur.fetchall()}


def load_guards(
    conn: Any, consumer: str, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], GuardRow]:
    """Guard rows for ``keys`` = (aggregate_type, aggregate_id); absent keys are missing (one round trip)."""
    keys = list(keys)
    if not keys:
        return {}
    return read_guards(query_guards(conn, consumer, keys))


def insert_inbox(conn: Any, consumer: str, entries: Sequence[InboxEntry]) -> None:
    """Insert inbox rows (no ON CONFLICT: a concurrent duplicate raises ``UniqueViolation``)."""
    if not entries:
        return
    if len(entries) == 1:
        e = entries[0]
        conn.execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type,"
            " aggregate_id, aggregate_version, payload_hash) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (consumer, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id,
             e.aggregate_version, e.payload_hash),
        )
        return
    conn.execute(
        "INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type,"
        " aggregate_id, aggregate_version, payload_hash)"
        " SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[],"
        " %s::text[])",
        (
            consumer,
            [e.event_id for e in entries],
            [e.event_type for e in entries],
            [e.aggregate_type for e in entries],
            [e.aggregate_id for e in entries],
            [e.aggregate_version for e in entries],
            [e.payload_hash for e in entries],
        ),
    )


def advance_guards(
    conn: Any,
    consumer: str,
    updates: Sequence[tuple[str, str, int | None, int]],
    *,
    require_flowing: bool,
) -> None:
    """Record new last versions: ``updates`` = (aggregate_type, aggregate_id, expected, new).

    ``expected`` is the last version read at the start (None = no row yet). Existing rows are
    updated only where ``last_version = expected`` (and ``state = 'flowing'`` if
    ``require_flowing``); new rows are inserted. Two statements at most, set-based.

    Raises:
        GuardConflict: a row did not match (changed concurrently).
    """
    existing = [u for u in updates if u[2] is not None]
    fresh = [u for u in updates if u[2] is None]
    cond = " AND state = 'flowing'" if require_flowing else ""
    for t, i, expected, new in existing:  # the per-message path: one or a few rows
        cur = conn.execute(
            "UPDATE consumer_version_guard SET last_version = %s, updated_at = now()"
            " WHERE consumer = %s AND aggregate_type = %s AND aggregate_id = %s"
            "   AND last_version = %s" + cond,
            (new, consumer, t, i, expected),
        )
        if cur.rowcount != 1:
            raise GuardConflict(f"guard row {t} {i} changed concurrently (expected v{expected})")
    if fresh:
        cur = conn.execute(
            "INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id, last_version)"
            " SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::bigint[])"
            " ON CONFLICT DO NOTHING",
            (consumer, [u[0] for u in fresh], [u[1] for u in fresh], [u[3] for u in fresh]),
        )
        if cur.rowcount != len(fresh):
            raise GuardConflict(
                f"guard rows created concurrently ({cur.rowcount}/{len(fresh)} inserted)"
            )


def set_last_version(conn: Any, consumer: str, key: tuple[str, str], version: int) -> None:
    """Force ``last_version`` (accepted gap); creates the row if missing. Never lowers it."""
    conn.execute(
        "INSERT INTO consumer_version_guard (consumer, aggregate_type, aggregate_id, last_version)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
        " SET last_version = GREATEST(consumer_version_guard.last_version, EXCLUDED.last_version),"
        "     updated_at = now()",
        (consumer, key[0], key[1], version),
    )


def hold(
    conn: Any,
    consumer: str,
    *,
    event: InboxEntry,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    headers: Sequence[tuple[str, bytes]],
    timestamp_ms: int | None,
    base_version: int,
    hold_s: float,
) -> bool:
    """Store an event behind a gap and mark its aggregate ``holding`` (if it was flowing).

    ``base_version`` is the last version to record when the guard row does not exist yet
    (0 under the strict first-seen policy). Returns False if the event was already held.
    """
    cur = conn.execute(
        "INSERT INTO consumer_held_event (consumer, event_id, aggregate_type, aggregate_id,"
        " aggregate_version, topic, partition, \"offset\", key, value, header_names,"
        " header_values, timestamp_ms)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (consumer, event.event_id, event.aggregate_type, event.aggregate_id,
         event.aggregate_version, topic, partition, offset, key, value,
         [h[0] for h in headers], [h[1] if h[1] is not None else b"" for h in headers],
         timestamp_ms),
    )
    conn.execute(
        "INSERT INTO consumer_version_guard AS g (consumer, aggregate_type, aggregate_id,"
        " last_version, state, hold_deadline)"
        " VALUES (%s, %s, %s, %s, 'holding', now() + make_interval(secs => %s))"
        " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
        " SET state = 'holding', hold_deadline = EXCLUDED.hold_deadline, updated_at = now()"
        " WHERE g.state = 'flowing'",
        (consumer, event.aggregate_type, event.aggregate_id, base_version, hold_s),
    )
    return cur.rowcount == 1


def held_events(conn: Any, consumer: str, key: tuple[str, str]) -> list[HeldEvent]:
    """Held events of one aggregate in version order (locks them ``FOR UPDATE``)."""
    cur = conn.execute(
        "SELECT event_id, aggregate_type, aggregate_id, aggregate_version, topic, partition,"
        " \"offset\", key, value, header_names, header_values, timestamp_ms, attempts,"
        " first_failure, last_failure, last_error"
        " FROM consumer_held_event WHERE consumer = %s AND aggregate_type = %s AND aggregate_id = %s"
        " ORDER BY aggregate_version, held_at FOR UPDATE",
        (consumer, key[0], key[1]),
    )
    out = []
    for r in cur.fetchall():
        out.append(HeldEvent(
            event_id=r[0], aggregate_type=r[1], aggregate_id=r[2], aggregate_version=r[3],
            topic=r[4], partition=r[5], offset=r[6],
            key=bytes(r[7]) if r[7] is not None else None, value=bytes(r[8]),
            headers=tuple((n, bytes(v)) for n, v in zip(r[9], r[10], strict=True)),
            timestamp_ms=r[11], attempts=r[12], first_failure=r[13], last_failure=r[14],
            last_error=r[15],
        ))
    return out


def release_held(conn: Any, consumer: str, event_id: str) -> None:
    """Delete one held event (applied, stale or dead-lettered)."""
    conn.execute(
        "DELETE FROM consumer_held_event WHERE consumer = %s AND event_id = %s",
        (consumer, event_id),
    )


def record_held_failure(
    conn: Any, consumer: str, event_id: str, error: str, retry_in_s: float
) -> int:
    """Count a failed drain attempt of a held event; returns the attempt count."""
    cur = conn.execute(
        "UPDATE consumer_held_event SET attempts = attempts + 1,"
        " first_failure = coalesce(first_failure, now()), last_failure = now(), last_error = %s,"
        " next_attempt_at = now() + make_interval(secs => %s)"
        " WHERE consumer = %s AND event_id = %s RETURNING attempts",
        (error[:2000], retry_in_s, consumer, event_id),
    )
    row = cur.fetchone()
    return row[0] if row else 0


def set_state(
    conn: Any, consumer: str, key: tuple[str, str], state: AggregateState, *, hold_s: float = 0.0
) -> None:
    """Move an aggregate to ``state`` (``holding`` restarts the hold window of ``hold_s``)."""
    conn.execute(
        "UPDATE consumer_version_guard SET state = %s,"
        " hold_deadline = CASE WHEN %s::text = 'holding' THEN now() + make_interval(secs => %s) END,"
        " parked_at = CASE WHEN %s::text = 'parked' THEN now() END, updated_at = now()"
        " WHERE consumer = %s AND aggregate_type = %s AND aggregate_id = %s",
        (state.value, state.value, hold_s, state.value, consumer, key[0], key[1]),
    )


def waiting_aggregates(conn: Any, consumer: str, limit: int = 100) -> list[WaitingAggregate]:
    """Guard rows not flowing, locked ``FOR UPDATE SKIP LOCKED`` (safe with several instances)."""
    cur = conn.execute(
        "SELECT g.aggregate_type, g.aggregate_id, g.last_version, g.state,"
        "       coalesce(g.hold_deadline <= now(), false),"
        "       h.aggregate_version, coalesce(h.next_attempt_at <= now(), true)"
        " FROM consumer_version_guard g"
        " LEFT JOIN LATERAL (SELECT aggregate_version, next_attempt_at FROM consumer_held_event"
        "     WHERE consumer = g.consumer AND aggregate_type = g.aggregate_type"
        "       AND aggregate_id = g.aggregate_id ORDER BY aggregate_version LIMIT 1) h ON true"
        " WHERE g.consumer = %s AND g.state <> 'flowing'"
        " ORDER BY g.hold_deadline NULLS LAST LIMIT %s FOR UPDATE OF g SKIP LOCKED",
        (consumer, limit),
    )
    return [
        WaitingAggregate(aggregate_type=r[0], aggregate_id=r[1], last_version=r[2],
                         state=AggregateState(r[3]), expired=r[4], first_held=r[5],
                         first_held_due=r[6])
        for r in cur.fetchall()
    ]
