"""Replay checkpoint tables (PostgreSQL, in the projection's own database).

Written in the same transaction as the shadow rows of each batch, so after a crash the
checkpoint and the shadow tables agree and a rerun resumes exactly there::

    replay_run     (projection PK, run_id, from_spec, to_spec, state, shadow_tables,
                    events_applied, started_at, updated_at)
                   state: 'building' (shadow being filled) | 'built' (--to time, not swapped)
                   deferred_indexes: ``CREATE INDEX`` statements of the shadow tables'
                   secondary indexes, dropped for the rebuild (see :func:`defer_indexes`)
    replay_offset  (projection, topic, partition) -> next_offset
    replay_guard_batch (projection, seq) -> entries: the guard rows one batch changed, as JSON
                   text ``[[aggregate_type, aggregate_id, last_version], ...]``; the guard is
                   these folded in ``seq`` order
    replay_guard   (projection, aggregate_type, aggregate_id) -> last_version: guard rows of
                   runs checkpointed before replay_guard_batch existed (read first, never
                   written any more)

Why one row per batch: upserting each changed guard row into a B-tree keyed by text cost
PostgreSQL ~20 µs per row, up to one row per event (every decision is its own aggregate) —
the largest share of a replay's database time (bench/README.md, "Replay"); one JSON text row
per batch costs ~1 ms per 2,000 entries. The price is paid on resume: :func:`load_guard`
folds every batch row (a few MB per million events).

The swap transaction deletes the run row (so nothing can resume a swapped run); the offsets and
guard rows are deleted right after, and again by the next run's start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from casestream.replay import history

DDL = """
CREATE TABLE IF NOT EXISTS replay_run (
    projection     text        PRIMARY KEY,
    run_id         uuid        NOT NULL,
    from_spec      text        NOT NULL,
    to_spec        text        NOT NULL,
    state          text        NOT NULL CHECK (state IN ('building', 'built')),
    shadow_tables  text[]      NOT NULL,
    events_applied bigint      NOT NULL DEFAULT 0,
    started_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    deferred_indexes text[]    NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS replay_offset (
    projection  text    NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (projection, topic, partition)
);
CREATE TABLE IF NOT EXISTS replay_guard (
    projection     text   NOT NULL,
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    last_version   bigint NOT NULL,
    PRIMARY KEY (projection, aggregate_type, aggregate_id)
);
CREATE TABLE IF NOT EXISTS replay_guard_batch (
    projection text   NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    entries    text   NOT NULL,
    PRIMARY KEY (projection, seq)
);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRow:
    """A replay run found in ``replay_run``."""

    run_id: str
    from_spec: str
    to_spec: str
    state: str
    shadow_tables: tuple[str, ...]
    events_applied: int


def ensure_schema(conn: Any) -> None:
    """Create the checkpoint tables and ``replay_history`` if missing (idempotent; serialised by an advisory lock)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('casestream.replay.ddl'))")
        conn.execute(DDL)
        conn.execute(history.DDL)
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = 'replay_run'"
                        " AND column_name = 'deferred_indexes'"
                        " AND table_schema = current_schema()").fetchone() is None:
            # tables created before index deferral existed
            conn.execute("ALTER TABLE replay_run ADD COLUMN deferred_indexes text[] NOT NULL"
                         " DEFAULT '{}'")


def load_run(conn: Any, projection: str) -> RunRow | None:
    """The unfinished run of ``projection``, if any."""
    row = conn.execute(
        "SELECT run_id::text, from_spec, to_spec, state, shadow_tables, events_applied"
        " FROM replay_run WHERE projection = %s", (projection,)).fetchone()
    if row is None:
        return None
    return RunRow(run_id=row[0], from_spec=row[1], to_spec=row[2], state=row[3],
                  shadow_tables=tuple(row[4]), events_applied=row[5])


def start_run(conn: Any, projection: str, run_id: str, from_spec: str, to_spec: str,
              shadow_tables: tuple[str, ...]) -> None:
    """Forget any previous run of ``projection`` and record a new one (caller's transaction)."""
    clear(conn, projection)
    conn.execute(
        "INSERT INTO replay_run (projection, run_id, from_spec, to_spec, state, shadow_tables)"
        " VALUES (%s, %s, %s, %s, 'building', %s)",
        (projection, run_id, from_spec, to_spec, list(shadow_tables)))


_SECONDARY_INDEXES = """
SELECT c.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass(%s) AND NOT i.indisunique AND NOT i.indisprimary
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
ORDER BY c.relname
"""


def defer_indexes(conn: Any, projection: str, tables: tuple[str, ...]) -> list[str]:
    """Drop the secondary indexes of the (new, empty) shadow ``tables`` until
    :func:`restore_indexes`; their ``CREATE INDEX`` statements are kept in the run row.

    Secondary = not unique, not primary, not backing a constraint: nothing a write relies on
    (``ON CONFLICT`` needs unique indexes, which stay). Maintaining them row by row cost
    PostgreSQL a quarter to a third of the insert time (bench/README.md, "Replay"); one
    ``CREATE INDEX`` over the finished table is cheaper. Caller's transaction, after
    :func:`start_run`.

    Returns:
        The deferred ``CREATE INDEX`` statements (``pg_get_indexdef``), in name order.
    """
    deferred: list[str] = []
    for table in tables:
        for name, definition in conn.execute(_SECONDARY_INDEXES, (table,)).fetchall():
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
            deferred.append(definition)
    if deferred:
        conn.execute("UPDATE replay_run SET deferred_indexes = %s WHERE projection = %s",
                     (deferred, projection))
    return deferred


def restore_indexes(conn: Any, projection: str) -> int:
    """Create the indexes :func:`defer_indexes` dropped and forget them (caller's transaction,
    before the shadow tables are marked built or swapped in). Returns how many were created;
    0 when nothing is deferred (also for runs started before deferral existed)."""
    row = conn.execute("SELECT deferred_indexes FROM replay_run WHERE projection = %s",
                       (projection,)).fetchone()
    deferred = list(row[0]) if row else []
    for definition in deferred:
        conn.execute(definition)
    if deferred:
        conn.execute("UPDATE replay_run SET deferred_indexes = '{}' WHERE projection = %s",
                     (projection,))
    return len(deferred)


def clear(conn: Any, projection: str) -> None:
    """Delete the run, offsets and guard rows of ``projection`` (caller's transaction)."""
    for table in ("replay_run", "replay_offset", "replay_guard", "replay_guard_batch"):
        conn.execute(f"DELETE FROM {table} WHERE projection = %s", (projection,))


def finish(conn: Any, projection: str) -> None:
    """Delete the run row (in the swap transaction): its offsets/guard rows are then inert."""
    conn.execute("DELETE FROM replay_run WHERE projection = %s", (projection,))


def mark_built(conn: Any, projection: str) -> None:
    """Record that the shadow tables are complete up to ``--to`` (not swapped)."""
    conn.execute("UPDATE replay_run SET state = 'built', updated_at = now()"
                 " WHERE projection = %s", (projection,))


def load_offsets(conn: Any, projection: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> next offset to read."""
    rows = conn.execute("SELECT topic, partition, next_offset FROM replay_offset"
                        " WHERE projection = %s", (projection,)).fetchall()
    return {(t, p): o for t, p, o in rows}


def load_guard(conn: Any, projection: str) -> dict[tuple[str, str], int]:
    """(aggregate_type, aggregate_id) -> last version applied to the shadow tables.

    The rows of ``replay_guard`` (older runs), then every ``replay_guard_batch`` row of
    ``projection`` in ``seq`` order, a later entry replacing an earlier one.

    Raises:
        ValueError: a batch row is not the JSON :func:`save` writes (a corrupt checkpoint).
    """
    cur = conn.execute("SELECT aggregate_type, aggregate_id, last_version FROM replay_guard"
                       " WHERE projection = %s", (projection,))
    guard = {(t, i): v for t, i, v in cur}
    cur = conn.execute("SELECT entries FROM replay_guard_batch WHERE projection = %s"
                       " ORDER BY seq", (projection,))
    for (entries,) in cur:
        guard.update(((t, i), v) for t, i, v in json.loads(entries))
    return guard


def save(conn: Any, projection: str, offsets: Mapping[tuple[str, int], int],
         guard: Mapping[tuple[str, str], int], applied: int) -> None:
    """Record one batch (caller's transaction, no result read): upsert ``offsets``
    ((topic, partition) -> next offset), append the changed ``guard`` rows
    ((aggregate_type, aggregate_id) -> last version) as one ``replay_guard_batch`` row, and add
    ``applied`` to the run's ``events_applied``."""
    if offsets:
        conn.execute(
            "INSERT INTO replay_offset (projection, topic, partition, next_offset)"
            " SELECT %s, * FROM unnest(%s::text[], %s::int[], %s::bigint[])"
            " ON CONFLICT (projection, topic, partition) DO UPDATE"
            " SET next_offset = EXCLUDED.next_offset",
            (projection, [k[0] for k in offsets], [k[1] for k in offsets], list(offsets.values())))
    if guard:
        conn.execute("INSERT INTO replay_guard_batch (projection, entries) VALUES (%s, %s)",
                     (projection, json.dumps([(t, i, v) for (t, i), v in guard.items()])))
    conn.execute("UPDATE replay_run SET events_applied = events_applied + %s, updated_at = now()"
                 " WHERE projection = %s", (applied, projection))


def fast_commits(conn: Any) -> None:
    """``synchronous_commit = off`` for the rebuild batch transaction now open on ``conn``.

    Safe here: a batch's shadow rows and its checkpoint are one transaction, so a database
    crash loses them together (WAL order) and the rerun resumes from an earlier checkpoint;
    nothing outside the database has seen them. ``SET LOCAL``, never for the session: behind
    a transaction pooler a session setting stays on the server connection and would make
    other clients' commits asynchronous.
    """
    conn.execute("SET LOCAL synchronous_commit = off")
