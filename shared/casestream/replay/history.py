"""Replay run history (PostgreSQL, the projection's own database): one row per replay run.

The checkpoint row (``replay_run``) exists only while a run can be resumed and is deleted by
the swap; this table keeps every run, for the operations console::

    replay_history (run_id PK, projection, mode, state, started_at, updated_at, finished_at,
                    events_read, events_applied, events_remaining, error)
                   state: 'running' | 'finished' | 'failed'
                   events_remaining: messages between the run's positions and its targets
                   (the ``--to`` offsets, or the high watermarks for ``--to now``) at
                   ``updated_at``; progress = read / (read + remaining)

Written at the replay's progress points, not per event: a row when the run starts, an update
with a rebuild batch at most every :data:`UPDATE_INTERVAL_S` seconds (in that batch's
transaction), and the end state. A run is one invocation: a resumed run gets a new row whose
counters start at 0. Rows are never deleted by the replay.
"""

from __future__ import annotations

from typing import Any

#: Least time between two progress updates of a run's row, seconds.
UPDATE_INTERVAL_S = 1.0

DDL = """
CREATE TABLE IF NOT EXISTS replay_history (
    run_id           uuid        PRIMARY KEY,
    projection       text        NOT NULL,
    mode             text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('running', 'finished', 'failed')),
    started_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    events_read      bigint      NOT NULL DEFAULT 0,
    events_applied   bigint      NOT NULL DEFAULT 0,
    events_remaining bigint      NOT NULL DEFAULT 0,
    error            text
);
CREATE INDEX IF NOT EXISTS replay_history_started ON replay_history (started_at DESC);
"""


def begin(conn: Any, run_id: str, projection: str, mode: str, remaining: int) -> None:
    """Record a new running run (caller's transaction or autocommit)."""
    conn.execute("INSERT INTO replay_history (run_id, projection, mode, state, events_remaining)"
                 " VALUES (%s, %s, %s, 'running', %s)", (run_id, projection, mode, remaining))


def update(conn: Any, run_id: str, read: int, applied: int, remaining: int) -> None:
    """Set the counters of a running run (caller's transaction, no result read)."""
    conn.execute("UPDATE replay_history SET events_read = %s, events_applied = %s,"
                 " events_remaining = %s, updated_at = now() WHERE run_id = %s",
                 (read, applied, remaining, run_id))


def end(conn: Any, run_id: str, state: str, read: int, applied: int, remaining: int,
        error: str | None = None) -> None:
    """Record the end of a run: ``state`` 'finished' or 'failed' (with ``error``, one line)."""
    conn.execute("UPDATE replay_history SET state = %s, events_read = %s, events_applied = %s,"
                 " events_remaining = %s, error = %s, updated_at = now(), finished_at = now()"
                 " WHERE run_id = %s", (state, read, applied, remaining, error, run_id))
