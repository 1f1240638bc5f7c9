"""Switch an outbox's publisher between the relay and Debezium (CDC) while writers keep
writing: nothing lost, duplicates only of rows both published (same ``id`` header, dropped by
the consumers' inboxes). What ``casestream outbox handover`` runs.

Both directions rest on a checkpoint ``(S, L)`` (:func:`casestream.outbox.cdc.take_checkpoint`:
every row with ``seq <= S`` committed before WAL position ``L``, every later row after it) and
a *marker*: an outbox row of aggregate type :data:`MARKER_AGGREGATE_TYPE` (topic
``outbox.event.casestream_handover``, which no consumer reads), inserted after the switch
point. Its arrival on the topic shows the new pipeline runs; the slot's
``confirmed_flush_lsn`` passing the marker's commit shows Debezium had every earlier change
acknowledged by Kafka (it confirms an LSN only after Connect committed the offset, which it
does only for acknowledged records).

relay -> cdc::

    1. publication + replication slot (created if absent): Debezium streams every change
       committed from here on; the connector is created (``snapshot.mode=no_data``), with
       its stored offsets removed when the slot is new (ConnectClient.start_fresh)
    2. checkpoint (S, L), after the slot exists: rows above S are Debezium's
    3. wait until no row at or below S is pending: the still running relay published them
    4. outbox_publisher = cdc: the relay claims nothing more
    5. marker; wait for it on the topic and for the slot to confirm it

cdc -> relay::

    1. checkpoint (S, L); marker; wait for it on the topic and for the slot to confirm it:
       Debezium published every row at or below S
    2. in one transaction: pending rows at or below S -> published; outbox_publisher = relay:
       the relay publishes the rows above S (those Debezium sent as well are duplicates)
    3. the connector is deleted (its slot too, with ``drop_slot``)

Errors: :class:`casestream.outbox.cdc.CdcError` (a wait timed out: the message says what was
awaited and what to check), :class:`casestream.outbox.connect.ConnectError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from confluent_kafka import Consumer, TopicPartition

from casestream.outbox.cdc import (
    CDC_HEARTBEAT_DDL,
    CDC_HEARTBEAT_TABLE,
    CdcError,
    cdc_status,
    default_slot_name,
    set_publisher,
    take_checkpoint,
)
from casestream.outbox.connect import ConnectClient, outbox_connector_config
from casestream.outbox.writer import DEFAULT_TOPIC_PREFIX

__all__ = ["MARKER_AGGREGATE_TYPE", "MARKER_EVENT_TYPE", "HandoverResult", "handover", "connector_for_dsn"]

MARKER_AGGREGATE_TYPE = "casestream_handover"
"""Aggregate type of marker rows: topic ``outbox.event.casestream_handover``."""
MARKER_EVENT_TYPE = "casestream.PublisherHandover"
"""Event type (header ``type``) of marker rows; the payload is the target publisher in UTF-8."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoverResult:
    """What a handover did: the new ``publisher``, checkpoint ``seq``/``lsn``, the marker's
    id, ``failed_below`` (failed rows at or below seq that nobody will publish: re-drive them
    under the relay, or discard), ``seconds`` it took."""

    publisher: str
    seq: int
    lsn: str
    marker_id: str
    failed_below: int
    seconds: float


def handover(dsn: str, *, to: str, slot: str, bootstrap: str, connect: ConnectClient | None,
             connector: str, connector_config: dict[str, str] | None = None,
             drop_slot: bool = False, timeout_s: float = 120.0,
             kafka_properties: dict[str, Any] | None = None,
             progress: Callable[[str], None] = lambda _m: None) -> HandoverResult:
    """Switch ``dsn``'s outbox to publisher ``to`` (``cdc`` or ``relay``), see the module
    docstring. ``connect``/``connector``/``connector_config``: the Connect REST API and the
    connector to create (to cdc) or delete (to relay); with ``connect`` None the connector is
    someone else's to run. ``timeout_s`` bounds each wait.

    Raises:
        ValueError: ``to`` is neither ``cdc`` nor ``relay``.
        CdcError: a wait timed out.
        ConnectError: Kafka Connect refused the connector.
    """
    if to not in ("cdc", "relay"):
        raise ValueError(f"--to {to!r}: cdc or relay")
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        if to == "cdc":
            fresh = _ensure_slot(conn, slot, progress)
            if connect is not None and connector_config is not None:
                if fresh:  # offsets stored for an earlier slot of this name point at lost WAL
                    connect.start_fresh(connector, connector_config, timeout_s=timeout_s)
                else:
                    connect.put(connector, connector_config)
                connect.wait_running(connector, timeout_s=timeout_s)
                progress(f"connector {connector} running")
            cp = _checkpoint(conn, timeout_s)
            progress(f"checkpoint seq={cp.seq} lsn={cp.lsn}; waiting for the relay to publish up to it")
            _wait(lambda: _pending_at_or_below(conn, cp.seq) == 0, timeout_s,
                  lambda: f"{_pending_at_or_below(conn, cp.seq)} rows at or below seq {cp.seq} are still "
                          "pending: is the relay running?")
            with conn.transaction():
                set_publisher(conn, "cdc")
            progress("outbox_publisher = cdc: the relay stops claiming")
            marker = _marker_round_trip(conn, slot, bootstrap, "cdc", timeout_s, kafka_properties, progress)
        else:
            if not cdc_status(conn, slot).slot_exists:
                raise CdcError(f"no replication slot {slot} on this database: nothing publishes by CDC "
                               "here (a handover to the relay needs Debezium running until it completes)")
            cp = _checkpoint(conn, timeout_s)
            progress(f"checkpoint seq={cp.seq} lsn={cp.lsn}")
            marker = _marker_round_trip(conn, slot, bootstrap, "relay", timeout_s, kafka_properties, progress)
            with conn.transaction():
                conn.execute("UPDATE outbox SET status = 'published', published_at = now() "
                             "WHERE status = 'pending' AND seq <= %s", (cp.seq,))
                set_publisher(conn, "relay")
            progress(f"rows up to seq {cp.seq} marked published; outbox_publisher = relay")
            if connect is not None:
                connect.delete(connector)
                progress(f"connector {connector} deleted")
            if drop_slot:
                _drop_slot(conn, slot, timeout_s)
                progress(f"replication slot {slot} dropped")
        failed = conn.execute("SELECT count(*) FROM outbox WHERE status = 'failed' AND seq <= %s",
                              (cp.seq,)).fetchone()
    return HandoverResult(publisher=to, seq=cp.seq, lsn=cp.lsn, marker_id=marker,
                          failed_below=int(failed[0]) if failed else 0, seconds=time.monotonic() - t0)


def connector_for_dsn(dsn: str, slot: str | None = None) -> tuple[str, str, dict[str, str]]:
    """(database, slot, connector configuration) of the outbox at ``dsn`` (a PostgreSQL URL or
    conninfo): :func:`~casestream.outbox.connect.outbox_connector_config` with its host, port,
    user, password and database; ``slot`` default ``casestream_<database>_outbox``."""
    info = conninfo_to_dict(dsn)
    database = str(info.get("dbname") or "")
    slot = slot or default_slot_name(database)
    return database, slot, outbox_connector_config(
        database, host=str(info.get("host") or "127.0.0.1"), port=int(info.get("port") or 5432),
        user=str(info.get("user") or "postgres"), password=str(info.get("password") or ""), slot=slot)


def _ensure_slot(conn: psycopg.Connection[Any], slot: str, progress: Callable[[str], None]) -> bool:
    """Create the heartbeat table, the publication (outbox + heartbeat table) and the slot where
    missing; True if the slot is new."""
    conn.execute(CDC_HEARTBEAT_DDL)
    if not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (slot,)).fetchone():
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE outbox, {}").format(
            sql.Identifier(slot), sql.Identifier(CDC_HEARTBEAT_TABLE)))
        progress(f"publication {slot} created")
    elif not conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND tablename = %s",
                          (slot, CDC_HEARTBEAT_TABLE)).fetchone():
        conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
            sql.Identifier(slot), sql.Identifier(CDC_HEARTBEAT_TABLE)))
        progress(f"heartbeat table {CDC_HEARTBEAT_TABLE} added to publication {slot}")
    if not conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        progress(f"replication slot {slot} created")
        return True
    return False


def _drop_slot(conn: psycopg.Connection[Any], slot: str, timeout_s: float) -> None:
    # The connector's walsender lets go of the slot a moment after the connector is deleted.
    _wait(lambda: not _slot_active(conn, slot), timeout_s, lambda: f"replication slot {slot} is still in use")
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (slot,))


def _slot_active(conn: psycopg.Connection[Any], slot: str) -> bool:
    row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return bool(row and row[0])


def _checkpoint(conn: psycopg.Connection[Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while (cp := take_checkpoint(conn)) is None:
        if time.monotonic() > deadline:
            raise CdcError("could not lock the outbox for a checkpoint: a long transaction writes to it")
        time.sleep(0.05)
    return cp


def _pending_at_or_below(conn: psycopg.Connection[Any], seq: int) -> int:
    row = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending' AND seq <= %s", (seq,)).fetchone()
    return int(row[0]) if row else 0


def _wait(done: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise CdcError(f"handover: gave up after {timeout_s:.0f} s: {why()}")
        time.sleep(0.1)


def _marker_round_trip(conn: psycopg.Connection[Any], slot: str, bootstrap: str, target: str,
                       timeout_s: float, kafka_properties: dict[str, Any] | None,
                       progress: Callable[[str], None]) -> str:
    """Insert a marker row, wait for it on its topic and for the slot to confirm its commit."""
    topic = DEFAULT_TOPIC_PREFIX + MARKER_AGGREGATE_TYPE
    consumer = Consumer({**(kafka_properties or {}), "bootstrap.servers": bootstrap,
                         "group.id": f"casestream-handover-{uuid.uuid4()}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "allow.auto.create.topics": True})
    try:
        marker = uuid.uuid4()
        with conn.transaction():
            conn.execute(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, aggregate_version, "
                "occurred_at) VALUES (%s, %s, %s, %s, %s, 1, now())",
                (marker, MARKER_AGGREGATE_TYPE, str(marker), MARKER_EVENT_TYPE, target.encode()))
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        after = str(row[0]) if row else "0/0"
        progress(f"marker {marker} written (commit before {after}); waiting for it on {topic}")
        _await_marker(consumer, topic, str(marker), timeout_s)
        progress("marker arrived; waiting for the replication slot to confirm it")
        _wait(lambda: _slot_confirmed(conn, slot, after), timeout_s,
              lambda: f"replication slot {slot} has not confirmed {after} "
                      f"(confirmed: {cdc_status(conn, slot).confirmed_lsn}); is the connector running?")
        return str(marker)
    finally:
        consumer.close()


def _slot_confirmed(conn: psycopg.Connection[Any], slot: str, lsn: str) -> bool:
    row = conn.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                       "WHERE slot_name = %s", (lsn, slot)).fetchone()
    return bool(row and row[0])


def _await_marker(consumer: Consumer, topic: str, marker: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    key = marker.encode()
    assigned = False
    while time.monotonic() < deadline:
        if not assigned:
            md = consumer.list_topics(topic, timeout=5).topics.get(topic)
            if md is None or md.error is not None or not md.partitions:
                time.sleep(0.2)  # the topic appears with the first marker ever published
                continue
            consumer.assign([TopicPartition(topic, p, -2) for p in md.partitions])  # -2: beginning
            assigned = True
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        if msg.key() == key:
            return
    raise CdcError(f"handover: marker {marker} did not arrive on {topic} within {timeout_s:.0f} s: "
                   "is the new publisher running?")
