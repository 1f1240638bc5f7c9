"""Durable retry state of failed messages: attempt counts and next-attempt times in PostgreSQL.

Driver module (psycopg 3). One row per (consumer, event id) of a message whose handler (or
decoding) failed and that is neither applied nor done with: ``consumer_retry``, beside the
inbox, written in the batch's own transaction. Because the count and the backoff live in the
database and not in a member's memory, a message is tried at most ``RetryPolicy.max_attempts``
times whichever group member tries it, across rebalances and restarts; a member that is
handed the message waits the rest of the backoff the previous one scheduled
(``next_attempt_at``, compared with the database clock so members' clocks do not matter);
and its dead letter carries the true attempt count.

Lifecycle of a row::

    first failure          INSERT attempts=1, first_failure=now(), next_attempt_at=now()+delay
    later failure          attempts+1, next_attempt_at=now()+delay
    applied / duplicate    DELETE (same transaction as the effect)
    dead-lettered          dead_lettered=true (kept: a redelivery of the same position after a
                           crash between the database commit and the dead letter's delivery is
                           dead-lettered again with the recorded count, never retried)
    re-driven              a delivery from another position (the ``<consumer>.redrive`` topic)
                           of a dead-lettered event starts a new series of attempts
    purged                 dead-lettered rows older than ``ConsumerSettings.retry_state_retention_s``

The key is the envelope's event id; a message that could not be decoded is keyed by its
``id`` header, or by ``@topic/partition/offset`` without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from casestream.consumer.records import Record

RETRY_DDL = """
CREATE TABLE IF NOT EXISTS consumer_retry (
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    topic           text        NOT NULL,
    partition       integer     NOT NULL,
    "offset"        bigint      NOT NULL,
    attempts        integer     NOT NULL,
    first_failure   timestamptz NOT NULL,
    last_failure    timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    dead_lettered   boolean     NOT NULL DEFAULT false,
    error_class     text        NOT NULL DEFAULT '',
    reason          text        NOT NULL DEFAULT '',
    last_error      text        NOT NULL DEFAULT '',
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS consumer_retry_dead_lettered
    ON consumer_retry (consumer, last_failure) WHERE dead_lettered;
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryState:
    """One ``consumer_retry`` row as read at the start of a batch.

    Attributes:
        attempts: failed attempts so far (>= 1).
        first_failure, last_failure: times of the first and the last failed attempt.
        wait_s: seconds until ``next_attempt_at`` by the database clock (0 when due).
        dead_lettered: the message was dead-lettered after ``attempts``.
        position: (topic, partition, offset) of the delivery that failed last.
        error_class, reason, message: of the last failure (the dead letter's headers).
    """

    attempts: int
    first_failure: datetime
    last_failure: datetime
    wait_s: float
    dead_lettered: bool
    position: tuple[str, int, int]
    error_class: str
    reason: str
    message: str

    def same_delivery(self, rec: Record) -> bool:
        """True if ``rec`` is the delivery this row was recorded for (not a re-drive)."""
        return self.position == (rec.topic, rec.partition, rec.offset)


def retry_key(rec: Record, env: Any = None) -> str:
    """The key of ``rec`` in ``consumer_retry``: event id, else ``id`` header, else position."""
    eid = getattr(env, "event_id", None) or rec.header("id")
    return eid or f"@{rec.topic}/{rec.partition}/{rec.offset}"


_SELECT = ("SELECT event_id, attempts, first_failure, last_failure,"
           " greatest(extract(epoch FROM next_attempt_at - now()), 0)::float8, dead_lettered,"
           " topic, partition, \"offset\", error_class, reason, last_error"
           " FROM consumer_retry WHERE consumer = %s AND event_id = ANY(%s)")


def query_retries(conn: Any, consumer: str, keys: Sequence[str]) -> Any:
    """Send the lookup of ``keys``; read it with :func:`read_retries` (pipeline-friendly)."""
    return conn.execute(_SELECT, (consumer, list(keys)))


def read_retries(cur: Any) -> dict[str, RetryState]:
    """Result of :func:`query_retries`: key -> state (absent keys have no row)."""
    return {r[0]: RetryState(attempts=r[1], first_failure=r[2], last_failure=r[3],
                             wait_s=float(r[4]), dead_lettered=r[5],
                             position=(r[6], r[7], r[8]), error_class=r[9], reason=r[10],
                             message=r[11])
            for r in cur.fetchall()}


def load_retries(conn: Any, consumer: str, keys: Sequence[str]) -> dict[str, RetryState]:
    """The retry rows of ``keys`` (one round trip; none for an empty ``keys``)."""
    if not keys:
        return {}
    return read_retries(query_retries(conn, consumer, keys))


def record_failure(conn: Any, consumer: str, key: str, rec: Record, *, error_class: str,
                   reason: str, message: str) -> tuple[int, datetime, datetime]:
    """Count one failed attempt of ``rec``; returns (attempts, first_failure, last_failure).

    A dead-lettered row (a re-driven event) starts a new series at 1. ``next_attempt_at`` is
    set to now: :func:`schedule` sets the backoff once the caller knows the count.
    """
    row = conn.execute(
        "INSERT INTO consumer_retry AS r (consumer, event_id, topic, partition, \"offset\","
        " attempts, first_failure, last_failure, next_attempt_at, error_class, reason,"
        " last_error)"
        " VALUES (%s, %s, %s, %s, %s, 1, now(), now(), now(), %s, %s, %s)"
        " ON CONFLICT (consumer, event_id) DO UPDATE SET"
        "  attempts = CASE WHEN r.dead_lettered THEN 1 ELSE r.attempts + 1 END,"
        "  first_failure = CASE WHEN r.dead_lettered THEN now() ELSE r.first_failure END,"
        "  last_failure = now(), next_attempt_at = now(), dead_lettered = false,"
        "  topic = EXCLUDED.topic, partition = EXCLUDED.partition, \"offset\" = EXCLUDED.\"offset\","
        "  error_class = EXCLUDED.error_class, reason = EXCLUDED.reason,"
        "  last_error = EXCLUDED.last_error"
        " RETURNING attempts, first_failure, last_failure",
        (consumer, key, rec.topic, rec.partition, rec.offset, error_class, reason,
         message[:2000]),
    ).fetchone()
    return row[0], row[1], row[2]


def schedule(conn: Any, consumer: str, key: str, delay_s: float) -> None:
    """Set the next attempt of ``key`` ``delay_s`` seconds from now (database clock)."""
    conn.execute("UPDATE consumer_retry SET next_attempt_at = now() + make_interval(secs => %s)"
                 " WHERE consumer = %s AND event_id = %s", (delay_s, consumer, key))


def mark_dead_lettered(conn: Any, consumer: str, key: str, rec: Record, *, attempts: int,
                       error_class: str, reason: str, message: str) -> None:
    """Record that ``key`` was dead-lettered after ``attempts`` (creates the row if missing)."""
    conn.execute(
        "INSERT INTO consumer_retry AS r (consumer, event_id, topic, partition, \"offset\","
        " attempts, first_failure, last_failure, next_attempt_at, dead_lettered, error_class,"
        " reason, last_error)"
        " VALUES (%s, %s, %s, %s, %s, %s, now(), now(), now(), true, %s, %s, %s)"
        " ON CONFLICT (consumer, event_id) DO UPDATE SET attempts = EXCLUDED.attempts,"
        "  last_failure = now(), dead_lettered = true, topic = EXCLUDED.topic,"
        "  partition = EXCLUDED.partition, \"offset\" = EXCLUDED.\"offset\","
        "  error_class = EXCLUDED.error_class, reason = EXCLUDED.reason,"
        "  last_error = EXCLUDED.last_error",
        (consumer, key, rec.topic, rec.partition, rec.offset, attempts, error_class, reason,
         message[:2000]),
    )


def clear_retries(conn: Any, consumer: str, keys: Sequence[str]) -> None:
    """Delete the rows of ``keys`` (their messages were applied or found done)."""
    if keys:
        conn.execute("DELETE FROM consumer_retry WHERE consumer = %s AND event_id = ANY(%s)",
                     (consumer, list(keys)))


def purge_dead_lettered(conn: Any, consumer: str, older_than_s: float) -> int:
    """Delete dead-lettered rows whose last failure is older than ``older_than_s``; returns how many."""
    cur = conn.execute(
        "DELETE FROM consumer_retry WHERE consumer = %s AND dead_lettered"
        " AND last_failure < now() - make_interval(secs => %s)", (consumer, older_than_s))
    return cur.rowcount


__all__ = ["RETRY_DDL", "RetryState", "clear_retries", "load_retries", "mark_dead_lettered",
           "purge_dead_lettered", "query_retries", "read_retries", "record_failure",
           "retry_key", "schedule"]
