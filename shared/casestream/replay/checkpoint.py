"""Replay checkpoint tables (PostgreSQL, in the projection's own database).

Written in the same transaction as the shadow rows of each batch, so after a crash the
checkpoint and the shadow tables agree and a rerun resumes exactly there::

    replay_run     (projection PK, run_id, from_spec, to_spec, state, shadow_tables,
                    events_applied, started_at, updated_at)
                   state: 'building' (shadow being filled) | 'built' (--to time, not swapped)
    replay_offset  (projection, topic, partition) -> next_offset
    replay_guard   (projection, aggregate_type, aggregate_id) -> last_version

The swap transaction deletes the run row (so nothing can resume a swapped run); the offsets and
guard rows are deleted right after, and again by the next run's start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    updated_at     timestamptz NOT NULL DEFAULT now()
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
    """Create the checkpoint tables if missing (idempotent; serialised by an advisory lock)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('casestream.replay.ddl'))")
        conn.execute(DDL)


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


def clear(conn: Any, projection: str) -> None:
    """Delete the run, offsets and guard rows of ``projection`` (caller's transaction)."""
    for table in ("replay_run", "replay_offset", "replay_guard"):
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
    """(aggregate_type, aggregate_id) -> last version applied to the shadow tables."""
    cur = conn.execute("SELECT aggregate_type, aggregate_id, last_version FROM replay_guard"
                       " WHERE projection = %s", (projection,))
    return {(t, i): v for t, i, v in cur}


def save(conn: Any, projection: str, offsets: Mapping[tuple[str, int], int],
         guard: Mapping[tuple[str, str], int], applied: int) -> None:
    """Upsert offsets and guard rows of one batch (caller's transaction, no result read)."""
    if offsets:
        conn.execute(
            "INSERT INTO replay_offset (projection, topic, partition, next_offset)"
            " SELECT %s, * FROM unnest(%s::text[], %s::int[], %s::bigint[])"
            " ON CONFLICT (projection, topic, partition) DO UPDATE"
            " SET next_offset = EXCLUDED.next_offset",
            (projection, [k[0] for k in offsets], [k[1] for k in offsets], list(offsets.values())))
    if guard:
        # One JSON parameter instead of three arrays: json.dumps is C, array adaptation is not.
        conn.execute(
            "INSERT INTO replay_guard (projection, aggregate_type, aggregate_id, last_version)"
            " SELECT %s, r->>0, r->>1, (r->>2)::bigint FROM json_array_elements(%s::json) r"
            " ON CONFLICT (projection, aggregate_type, aggregate_id) DO UPDATE"
            " SET last_version = EXCLUDED.last_version",
            (projection, json.dumps([(t, i, v) for (t, i), v in guard.items()])))
    conn.execute("UPDATE replay_run SET events_applied = events_applied + %s, updated_at = now()"
                 " WHERE projection = %s", (applied, projection))
