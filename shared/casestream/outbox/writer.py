"""Transactional outbox: the table, the writer, and optimistic aggregate-version checks.

A service stores its state change and the events describing it in ONE PostgreSQL
transaction: :meth:`OutboxWriter.append` inserts the already-encoded events into the
``outbox`` table using the caller's connection, inside the caller's transaction. The
relay (:mod:`casestream.outbox.relay`) or a Debezium connector (``deploy/debezium/``) then puts
them on Kafka.

Table ``outbox`` (Debezium Outbox Event Router default column names first):

==================  ===========  ==========================================================
column              type         meaning
==================  ===========  ==========================================================
id                  uuid PK      event id; Kafka header ``id`` (Debezium ``table.field.event.id``)
aggregatetype       text         aggregate type; topic = ``outbox.event.<aggregatetype>``
aggregateid         text         aggregate id; Kafka message key (UTF-8)
type                text         event type; Kafka header ``type``
payload             bytea        the encoded Kafka message value (Confluent Avro framing)
seq                 bigint       identity, insert order; per-aggregate publish order
shard               smallint     ``hashtext(aggregateid) & 31``: relay lease unit (generated)
aggregate_version   bigint       the aggregate's version after this event (>= 1)
event_version       integer      schema version of the event type; header ``event_version``
tenant_id           text         tenant (operability, filters in the CLI)
correlation_id      text         header ``correlation_id``
traceparent         text         W3C trace context of the span current at append (else the
                                 envelope's; ``casestream.telemetry.traceparent_for_row``);
                                 the relay sends its own child span's in header ``traceparent``
occurred_at         timestamptz  when the fact happened (from the envelope)
created_at          timestamptz  insert time (``now()`` of the writing transaction)
status              text         ``pending`` | ``published`` | ``failed`` | ``discarded``
                                 (an operator gave a failed row up: it no longer holds back
                                 its aggregate; kept for audit)
attempts            integer      failed publish attempts so far
next_attempt_at     timestamptz  not before this time (backoff); ``-infinity`` = at once
last_error          text         last publish error (``CODE: message``)
published_at        timestamptz  Kafka message timestamp of the delivered message
kafka_partition     integer      partition of the delivered message
kafka_offset        bigint       offset of the delivered message
==================  ===========  ==========================================================

Header values are UTF-8 strings of the column values, exactly what Debezium's
``SimpleHeaderConverter`` writes for the same columns, and a NULL column is a header with a
null value (:func:`headers_for`), so both publishers emit the same topic, partition, key,
value and header set.

Other tables: ``outbox_relay_lease`` (32 shard leases), ``outbox_relay_member`` (live
relay instances, for balancing), ``outbox_aggregate_version`` (stream version per
aggregate for :meth:`OutboxWriter.append`'s ``expected_version``), ``outbox_claim_floor``
(the ``seq`` below which nothing is pending, :data:`OUTBOX_CLAIM_FLOOR_DDL`). An
``AFTER INSERT ... FOR EACH STATEMENT`` trigger sends ``NOTIFY casestream_outbox`` so a
relay wakes at once (one notification per inserting statement, merged per transaction).

Indexes keep the relay's scans proportional to *unpublished* rows, not to table size:
``(seq) WHERE status='pending'`` (claim); ``(aggregateid, aggregatetype, seq) WHERE
status='failed' OR (status='pending' AND attempts>0)`` (the held-back check: only rows that
ever failed are in it, so it stays tiny); ``(published_at) WHERE status='published'``
(retention); ``(seq) WHERE status='failed'`` (CLI). While a snapshot is held open the
pending index keeps the entries of rows published since; the claim skips them by starting at
the claim floor.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from casestream.migrations import Migration
from casestream.errors import CasestreamError, ConcurrencyError, ConfigError
from casestream.telemetry.core import db_span
from casestream.telemetry.tracing import traceparent_for_row

__all__ = [
    "OUTBOX_DDL",
    "OUTBOX_MIGRATION",
    "OUTBOX_STORAGE_MIGRATION",
    "OUTBOX_MIGRATIONS",
    "OUTBOX_SHARDS",
    "OUTBOX_PUBLISHER_DDL",
    "OUTBOX_PUBLISHER_MIGRATION",
    "NOTIFY_CHANNEL",
    "DEFAULT_TOPIC_PREFIX",
    "OutboxWriter",
    "EventEncoder",
    "bump_version",
    "topic_for",
    "headers_for",
]

OUTBOX_SHARDS = 32
"""Number of relay shards; fixed by the DDL (``hashtext(aggregateid) & 31``)."""

NOTIFY_CHANNEL = "casestream_outbox"
"""LISTEN/NOTIFY channel the insert trigger notifies; the payload is the table's schema."""

DEFAULT_TOPIC_PREFIX = "outbox.event."

MAX_MESSAGE_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``: what the relay's producer can send at most."""
ROW_OVERHEAD_BYTES = 2048
"""Bytes kept for the record framing and the headers around key and payload."""


class OutboxRowTooLarge(CasestreamError):
    """An encoded event is larger than the relay could ever publish; it is refused at
    append (the caller's transaction rolls back) instead of blocking its aggregate's later
    events behind a row that fails with ``MSG_SIZE_TOO_LARGE`` for ever."""
"""Debezium EventRouter default ``route.topic.replacement`` = ``outbox.event.${routedByValue}``."""

OUTBOX_DDL = """
CREATE TABLE IF NOT EXISTS outbox (
    id                uuid        PRIMARY KEY,
    aggregatetype     text        NOT NULL,
    aggregateid       text        NOT NULL,
    type              text        NOT NULL,
    payload           bytea       NOT NULL,
    seq               bigint      GENERATED ALWAYS AS IDENTITY,
    shard             smallint    GENERATED ALWAYS AS ((hashtext(aggregateid) & 31)::smallint) STORED,
    aggregate_version bigint      NOT NULL CHECK (aggregate_version >= 1),
    event_version     integer     CHECK (event_version >= 1),
    tenant_id         text,
    correlation_id    text,
    traceparent       text,
    occurred_at       timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    status            text        NOT NULL DEFAULT 'pending'
                                  CHECK (status IN ('pending', 'published', 'failed', 'discarded')),
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL DEFAULT '-infinity',
    last_error        text,
    published_at      timestamptz,
    kafka_partition   integer,
    kafka_offset      bigint
);
CREATE INDEX IF NOT EXISTS outbox_pending_idx ON outbox (seq) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_blocking_idx ON outbox (aggregateid, aggregatetype, seq)
    WHERE status = 'failed' OR (status = 'pending' AND attempts > 0);
CREATE INDEX IF NOT EXISTS outbox_published_at_idx ON outbox (published_at) WHERE status = 'published';
CREATE INDEX IF NOT EXISTS outbox_failed_idx ON outbox (seq) WHERE status = 'failed';

CREATE TABLE IF NOT EXISTS outbox_relay_lease (
    shard        smallint    PRIMARY KEY,
    locked_by    text,
    locked_until timestamptz NOT NULL DEFAULT '-infinity',
    epoch        bigint      NOT NULL DEFAULT 0
);
INSERT INTO outbox_relay_lease (shard) SELECT s FROM generate_series(0, 31) AS s
    ON CONFLICT (shard) DO NOTHING;

CREATE TABLE IF NOT EXISTS outbox_relay_member (
    owner           text        PRIMARY KEY,
    name            text        NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_until timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS outbox_aggregate_version (
    aggregatetype text   NOT NULL,
    aggregateid   text   NOT NULL,
    version       bigint NOT NULL,
    PRIMARY KEY (aggregatetype, aggregateid)
);

CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('casestream_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
"""

OUTBOX_MIGRATION = Migration(name="casestream_outbox_001", sql=OUTBOX_DDL)
"""The outbox DDL as a migration for :func:`casestream.migrations.apply_migrations`."""

OUTBOX_STORAGE_DDL = """
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
"""
"""Autovacuum storage parameters of the outbox (PostgreSQL "Automatic Vacuuming",
per-table ``autovacuum_*``). Every row is inserted, updated once (``published``: a new
tuple, never a HOT update since ``status`` is in the partial indexes' predicates) and
deleted after ``published_retention_s``, so the table makes two dead tuples per event. With
the defaults (``autovacuum_vacuum_scale_factor=0.2``) they pile up to a fifth of the table
before a vacuum, and a large table is vacuumed ever more rarely; a fixed threshold of 5,000
dead tuples, not throttled (``cost_delay=0``), makes vacuum follow the event rate so the
freed space is reused and the table's size stays flat in a steady state (bench/retention.py).
The server's ``autovacuum_naptime`` (default 1 min) still bounds how often a vacuum starts: the
flat size holds the retained rows plus about one naptime of events' dead tuples (two per
event). The insert thresholds keep the visibility map fresh for the claim's index scans."""

OUTBOX_STORAGE_MIGRATION = Migration(name="casestream_outbox_002_autovacuum", sql=OUTBOX_STORAGE_DDL)
"""Autovacuum settings of the outbox table, applied after :data:`OUTBOX_MIGRATION`."""

OUTBOX_PUBLISHER_DDL = """
CREATE TABLE IF NOT EXISTS outbox_publisher (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    publisher  text        NOT NULL DEFAULT 'relay' CHECK (publisher IN ('relay', 'cdc')),
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO outbox_publisher DEFAULT VALUES ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS outbox_cdc_checkpoint (
    seq      bigint      PRIMARY KEY,
    lsn      pg_lsn      NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now()
);
"""

OUTBOX_PUBLISHER_MIGRATION = Migration(name="casestream_outbox_003_publisher", sql=OUTBOX_PUBLISHER_DDL)
"""Who publishes (relay or CDC) and the CDC checkpoints (:mod:`casestream.outbox.cdc`)."""

OUTBOX_CLAIM_FLOOR_DDL = """
CREATE TABLE IF NOT EXISTS outbox_claim_floor (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    seq         bigint      NOT NULL DEFAULT 0,
    generation  bigint      NOT NULL DEFAULT 0,
    advanced_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO outbox_claim_floor DEFAULT VALUES ON CONFLICT DO NOTHING;
"""
"""The relay's claim floor: no ``pending`` outbox row has a ``seq`` below ``seq``. The claim's
index scan starts there: while a snapshot stays open (``xmin`` held), the index entries of
rows published since cannot be removed nor marked dead, and a scan from the start walks
them all, on every claim (bench/xmin.py). Relays raise it once no transaction that could
still commit a row below it is running (``casestream.outbox.relay.store.advance_claim_floor``);
whatever makes a row pending again (:func:`casestream.outbox.admin.redrive`) lowers it in
the same transaction. A new row starts at 0, today's full scan: the migration is safe on a
live database."""

OUTBOX_CLAIM_FLOOR_MIGRATION = Migration(name="casestream_outbox_004_claim_floor", sql=OUTBOX_CLAIM_FLOOR_DDL)
"""The relay's claim floor table (:data:`OUTBOX_CLAIM_FLOOR_DDL`)."""

OUTBOX_MIGRATIONS = (OUTBOX_MIGRATION, OUTBOX_STORAGE_MIGRATION, OUTBOX_PUBLISHER_MIGRATION,
                     OUTBOX_CLAIM_FLOOR_MIGRATION)
"""Every migration of the outbox tables, in order: what a service applies before its own."""


class EventEncoder(Protocol):
    """What :class:`OutboxWriter` needs from a codec (``casestream.events.codec.EnvelopeCodec``)."""

    def encode(self, env: Any) -> bytes:
        """Return the Kafka message value (Confluent framing + Avro binary)."""
        ...


def topic_for(aggregate_type: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Return the topic of ``aggregate_type``: ``prefix + aggregate_type`` (Debezium routing)."""
    return prefix + aggregate_type


def headers_for(
    event_id: str, event_type: str, event_version: int | None,
    traceparent: str | None, correlation_id: str | None,
) -> list[tuple[str, bytes | None]]:
    """Return the Kafka headers of an outbox row: UTF-8 strings; a NULL column is a header
    with a null value (Kafka record header value length -1).

    The event contract's headers, always all five, in this order: ``id``, ``type``,
    ``event_version``, ``traceparent``, ``correlation_id``. A null-valued header rather than
    an omitted one is what Debezium's Outbox Event Router writes for a NULL column placed in
    a header (``table.fields.additional.placement``), so the relay and a Debezium connector
    emit the same header set for the same row; consumers read a null value as absent
    (``ConsumerRecord.header``).
    """
    version = str(event_version).encode() if event_version is not None else None
    return [("id", event_id.encode()), ("type", event_type.encode()), ("event_version", version),
            ("traceparent", traceparent.encode() if traceparent is not None else None),
            ("correlation_id", correlation_id.encode() if correlation_id is not None else None)]


_INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version,
                    event_version, tenant_id, correlation_id, traceparent, occurred_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


class OutboxWriter:
    """Appends events to the outbox in the caller's transaction.

    Args:
        codec: object with ``encode(env) -> bytes`` (the payload). If it also has
            ``topic_for(env) -> str``, the writer checks that it names the Debezium
            route ``topic_prefix + aggregate_type`` and raises ConfigError otherwise.
        topic_prefix: topic prefix used for that check only (the relay has its own).
        max_message_bytes: the relay producer's ``message.max.bytes`` (and no more than the
            topic's ``max.message.bytes``); a row whose key and payload leave less than
            :data:`ROW_OVERHEAD_BYTES` of it is refused with :class:`OutboxRowTooLarge`.
    """

    def __init__(self, codec: EventEncoder, *, topic_prefix: str = DEFAULT_TOPIC_PREFIX,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._codec = codec
        self._max_row = max_message_bytes - ROW_OVERHEAD_BYTES
        self._topic_prefix = topic_prefix
        self._topic_for = getattr(codec, "topic_for", None)
        self._headers = getattr(codec, "headers", None)

    def append(
        self,
        conn: psycopg.Connection,
        events: Iterable[Any],
        *,
        expected_version: int | None = None,
    ) -> list[uuid.UUID]:
        """Insert ``events`` (``casestream.events.envelope.Envelope`` objects) as outbox rows.

        Runs on ``conn`` inside the caller's open transaction, so the rows commit or roll
        back with the caller's state change. Rows are inserted in the given order; the
        relay publishes one aggregate's rows in that order.

        Args:
            conn: psycopg connection with a transaction open (non-autocommit, or inside
                ``conn.transaction()``).
            events: envelopes with ``event_id``, ``event_type``, ``event_version``,
                ``aggregate_type``, ``aggregate_id``, ``aggregate_version``,
                ``occurred_at``, ``tenant_id``, ``correlation_id``, ``traceparent``.
            expected_version: optimistic check, all events must then belong to one
                aggregate and carry versions ``expected_version + 1, + 2, ...``; the
                stream version in ``outbox_aggregate_version`` moves from
                ``expected_version`` to the last event's version, or ConcurrencyError.
                ``0`` means "the aggregate must not exist yet".

        Returns:
            The event ids inserted.

        Raises:
            ConcurrencyError: the aggregate is not at ``expected_version`` (another
                command won); the caller rolls back (the case API answers 409).
            ValueError: no transaction is open, or events do not fit ``expected_version``.
            ConfigError: the codec routes an event to another topic than the outbox would.
            OutboxRowTooLarge: an encoded event could never be published (class docstring).
        """
        envs = list(events)
        if not envs:
            return []
        if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            raise ValueError("OutboxWriter.append needs an open transaction "
                             "(use conn.transaction() on an autocommit connection)")
        if expected_version is not None:
            _check_stream_version(conn, envs, expected_version)
        rows = [self._row(env) for env in envs]
        with db_span("INSERT outbox", operation="INSERT", collection="outbox"), \
                conn.cursor() as cur:
            if len(rows) == 1:
                # executemany enters and leaves pipeline mode: ~1 ms of CPU for one row.
                cur.execute(_INSERT, rows[0])
            else:
                cur.executemany(_INSERT, rows)
        return [r[0] for r in rows]

    def _row(self, env: Any) -> tuple[Any, ...]:
        if self._topic_for is not None:
            routed = self._topic_for(env)
            expected = topic_for(env.aggregate_type, self._topic_prefix)
            if routed != expected:
                raise ConfigError(f"codec routes {env.event_type} to {routed!r}, "
                                  f"the outbox routes it to {expected!r}")
        own = getattr(env, "traceparent", None)
        traceparent = traceparent_for_row(own)
        if (traceparent is not None and own is None and hasattr(env, "traceparent")
                and dataclasses.is_dataclass(env)):
            # the body carries the journey's trace as the Kafka header does, so a consumer
            # that keeps only the envelope (an audit journal) still sees one trace id
            env = dataclasses.replace(env, traceparent=traceparent)
        payload = self._codec.encode(env)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"codec.encode returned {type(payload).__name__}, expected bytes")
        size = len(payload) + len(str(env.aggregate_id).encode())
        if size > self._max_row:
            raise OutboxRowTooLarge(
                f"{env.event_type} of {env.aggregate_type} {str(env.aggregate_id)[:64]}: "
                f"{size} bytes encoded, more than the {self._max_row} a published message "
                "can hold; bound the fields that carry input")
        event_id = env.event_id if isinstance(env.event_id, uuid.UUID) else uuid.UUID(str(env.event_id))
        occurred_at: datetime = env.occurred_at
        event_version = getattr(env, "event_version", None)
        if event_version is None and self._headers is not None:
            # None means "newest in the catalog": record the version the codec wrote.
            event_version = int(dict(self._headers(env))["event_version"])
        return (
            event_id, env.aggregate_type, str(env.aggregate_id), env.event_type, bytes(payload),
            int(env.aggregate_version), event_version,
            getattr(env, "tenant_id", None), getattr(env, "correlation_id", None),
            traceparent, occurred_at,
        )


def _check_stream_version(conn: psycopg.Connection, envs: Sequence[Any], expected: int) -> None:
    first = envs[0]
    key = (first.aggregate_type, str(first.aggregate_id))
    for i, env in enumerate(envs):
        if (env.aggregate_type, str(env.aggregate_id)) != key:
            raise ValueError("expected_version needs all events of one aggregate")
        if int(env.aggregate_version) != expected + 1 + i:
            raise ValueError(f"event {i} has aggregate_version {env.aggregate_version}, "
                             f"expected {expected + 1 + i} (versions must follow expected_version)")
    new_version = expected + len(envs)
    try:
        if expected == 0:
            row = conn.execute(
                "INSERT INTO outbox_aggregate_version (aggregatetype, aggregateid, version) "
                "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING version",
                (key[0], key[1], new_version),
            ).fetchone()
        else:
            row = conn.execute(
                "UPDATE outbox_aggregate_version SET version = %s "
                "WHERE aggregatetype = %s AND aggregateid = %s AND version = %s RETURNING version",
                (new_version, key[0], key[1], expected),
            ).fetchone()
    except psycopg.errors.SerializationFailure as e:  # REPEATABLE READ / SERIALIZABLE callers
        raise ConcurrencyError(key[0], key[1], expected, None) from e
    if row is None:
        actual = conn.execute(
            "SELECT version FROM outbox_aggregate_version WHERE aggregatetype = %s AND aggregateid = %s",
            key,
        ).fetchone()
        raise ConcurrencyError(key[0], key[1], expected, actual[0] if actual else None)


def bump_version(
    conn: psycopg.Connection,
    *,
    table: str,
    aggregate_type: str,
    aggregate_id: Any,
    expected: int,
    new_version: int | None = None,
    id_column: str = "id",
    version_column: str = "version",
    set_columns: Mapping[str, Any] | None = None,
) -> int:
    """Optimistic version check on a service's own aggregate table; returns the new version.

    Runs ``UPDATE <table> SET <version_column> = new, <set_columns...> WHERE <id_column> = id
    AND <version_column> = expected``. Under READ COMMITTED, concurrent commands on one
    aggregate block on the row lock and re-check the WHERE clause after the winner
    commits, so exactly one of N commands at the same expected version succeeds.

    Args:
        table, id_column, version_column: identifiers (quoted safely).
        aggregate_type: for the error message only.
        expected: the version the command read; must be >= 1 (creating an aggregate is
            an INSERT, whose primary key makes a second creator fail).
        new_version: defaults to ``expected + 1`` (pass ``expected + n`` for n events).
        set_columns: further columns to set in the same UPDATE (the state change).

    Raises:
        ConcurrencyError: the row is missing or not at ``expected``.
    """
    if expected < 1:
        raise ValueError("expected must be >= 1; create aggregates with an INSERT")
    new = expected + 1 if new_version is None else new_version
    assignments = [sql.SQL("{} = %s").format(sql.Identifier(version_column))]
    params: list[Any] = [new]
    for col, value in (set_columns or {}).items():
        assignments.append(sql.SQL("{} = %s").format(sql.Identifier(col)))
        params.append(value)
    query = sql.SQL("UPDATE {t} SET {a} WHERE {idc} = %s AND {vc} = %s RETURNING {vc}").format(
        t=sql.Identifier(*table.split(".")), a=sql.SQL(", ").join(assignments),
        idc=sql.Identifier(id_column), vc=sql.Identifier(version_column),
    )
    try:
        row = conn.execute(query, [*params, aggregate_id, expected]).fetchone()
    except psycopg.errors.SerializationFailure as e:
        raise ConcurrencyError(aggregate_type, str(aggregate_id), expected, None) from e
    if row is None:
        current = conn.execute(
            sql.SQL("SELECT {vc} FROM {t} WHERE {idc} = %s").format(
                vc=sql.Identifier(version_column), t=sql.Identifier(*table.split(".")),
                idc=sql.Identifier(id_column),
            ),
            [aggregate_id],
        ).fetchone()
        raise ConcurrencyError(aggregate_type, str(aggregate_id), expected, current[0] if current else None)
    return int(row[0])
