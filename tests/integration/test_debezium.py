"""Debezium (Kafka Connect + the PostgreSQL connector, started by ``deploy/infra.sh up connect``)
as the outbox publisher: the same records as the relay, CDC status and retention, and both
handovers under a steady writer with nothing lost.

One Connect worker for the module (the JVM start is most of the cost); each test its own
database (Debezium captures ``public.outbox`` of one database) and aggregate type (topic).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from click.testing import CliRunner

from casestream.cli.outbox import outbox
from casestream.outbox.admin import outbox_status
from casestream.migrations import apply_migrations, create_database
from casestream.outbox import OUTBOX_MIGRATIONS, OutboxWriter
from casestream.outbox.cdc import CdcRetention, cdc_status, default_slot_name, publisher, take_checkpoint
from casestream.outbox.connect import ConnectClient, connector_name, outbox_connector_config
from casestream.outbox.switch import handover
from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import JsonCodec, create_topics, drop_cdc_database, read_topics
from test_relay_support import LoadWriter, RelayThread, check_order, env, settings, wait_for

pytestmark = pytest.mark.debezium

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def connect(kafka_bootstrap: str, pg_url: str) -> Iterator[ConnectClient]:
    """The local Kafka Connect worker (started here when it is not running)."""
    done = subprocess.run([str(ROOT / "deploy" / "infra.sh"), "up", "connect"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    client = ConnectClient(f"http://127.0.0.1:{os.environ.get('CASESTREAM_CONNECT_PORT', '18083')}")
    yield client
    client.close()


class CdcDatabase:
    """A fresh database with the outbox tables, its connector and slot removed at the end."""

    def __init__(self, pg_url: str, connect: ConnectClient) -> None:
        self.name = f"cdc_{uuid.uuid4().hex[:10]}"
        self.dsn = pg_url.rstrip("/") + "/" + self.name
        self.slot = default_slot_name(self.name)
        self.connector = connector_name(self.name)
        self.agg_type = f"dbz{uuid.uuid4().hex[:8]}"
        self.topic = f"outbox.event.{self.agg_type}"
        self.connect = connect
        create_database(self.dsn)
        apply_migrations(self.dsn, list(OUTBOX_MIGRATIONS))
        url = urlsplit(pg_url)
        self.config = outbox_connector_config(self.name, host=url.hostname or "127.0.0.1",
                                              port=url.port or 5432, user=url.username or "postgres",
                                              password=url.password or "")

    def close(self, pg_url: str) -> None:
        self.connect.delete(self.connector)
        drop_cdc_database(pg_url, self.name, self.slot)


@pytest.fixture
def cdc_db(pg_url: str, connect: ConnectClient, kafka_bootstrap: str) -> Iterator[CdcDatabase]:
    db = CdcDatabase(pg_url, connect)
    create_topics(kafka_bootstrap, [db.topic], partitions=6)
    yield db
    db.close(pg_url)


def test_both_handovers_under_a_steady_writer_lose_nothing(
        cdc_db: CdcDatabase, connect: ConnectClient, kafka_bootstrap: str) -> None:
    relay = RelayThread(OutboxRelay(cdc_db.dsn, {"bootstrap.servers": kafka_bootstrap},
                                    settings("outbox.event."), "relay"))
    writer = LoadWriter(cdc_db.dsn, per_txn=3, aggregates=40, prefix="a", seed=7, pause_s=0.01,
                        make=lambda agg, version: env(agg, version, agg_type=cdc_db.agg_type))
    log: list[str] = []
    try:
        time.sleep(1.0)
        to_cdc = handover(cdc_db.dsn, to="cdc", slot=cdc_db.slot, bootstrap=kafka_bootstrap, connect=connect,
                          connector=cdc_db.connector, connector_config=cdc_db.config, timeout_s=60,
                          progress=log.append)
        with psycopg.connect(cdc_db.dsn) as conn:
            assert publisher(conn) == "cdc"
        time.sleep(1.5)  # Debezium alone publishes for a while
        with psycopg.connect(cdc_db.dsn) as conn:
            held = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending' AND seq > %s",
                                (to_cdc.seq,)).fetchone()[0]
        assert held > 0, "the relay kept publishing after the handover to CDC"
        to_relay = handover(cdc_db.dsn, to="relay", slot=cdc_db.slot, bootstrap=kafka_bootstrap,
                            connect=connect, connector=cdc_db.connector, drop_slot=True, timeout_s=60,
                            progress=log.append)
        time.sleep(1.0)  # the relay alone again
        total = writer.close()
        wait_for(lambda: _pending(cdc_db.dsn) == 0, 60, "the relay to publish the rest")
    finally:
        writer.stop.set()
        relay.close()
    assert to_cdc.publisher == "cdc" and to_relay.publisher == "relay"
    assert to_relay.seq > to_cdc.seq
    expected = {(cdc_db.topic, agg): ids for agg, ids in writer.written.items()}
    recs = read_topics(kafka_bootstrap, [cdc_db.topic], expected=total, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=True)  # asserts 0 lost, per-key order
    print(f"{total} events written, {stats}; handover to cdc {to_cdc.seconds:.1f} s, "
          f"to relay {to_relay.seconds:.1f} s\n" + "\n".join(log))


def _pending(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0])


def test_debezium_records_equal_the_relays_and_cdc_status_and_retention_follow_the_slot(
        cdc_db: CdcDatabase, connect: ConnectClient, kafka_bootstrap: str) -> None:
    writer = OutboxWriter(JsonCodec())
    rows = [env("k1", 1, agg_type=cdc_db.agg_type), env("k2", 1, agg_type=cdc_db.agg_type)]
    rows.append(type(rows[0])(aggregate_type=cdc_db.agg_type, aggregate_id="k1", aggregate_version=2,
                              correlation_id=None, traceparent=None))  # NULL header columns
    with psycopg.connect(cdc_db.dsn) as conn, conn.transaction():
        writer.append(conn, rows[:2])
    # The relay publishes the first two rows, then Debezium takes over and publishes the third.
    relay = OutboxRelay(cdc_db.dsn, {"bootstrap.servers": kafka_bootstrap}, settings("outbox.event."), "relay")
    try:
        while relay.run_once():
            pass
    finally:
        relay.close()
    handover(cdc_db.dsn, to="cdc", slot=cdc_db.slot, bootstrap=kafka_bootstrap, connect=connect,
             connector=cdc_db.connector, connector_config=cdc_db.config, timeout_s=60)
    with psycopg.connect(cdc_db.dsn) as conn, conn.transaction():
        writer.append(conn, rows[2:])
        # The relay's own records of the same rows, for comparison: re-publish row 1 by the relay.
    recs = read_topics(kafka_bootstrap, [cdc_db.topic], expected=3, timeout_s=30)
    by_id = {r.headers["id"].decode(): r for r in recs}
    relay_rec, dbz_rec = by_id[rows[0].event_id], by_id[rows[2].event_id]
    assert list(relay_rec.headers) == list(dbz_rec.headers) == [
        "id", "type", "event_version", "traceparent", "correlation_id"]
    assert dbz_rec.headers["correlation_id"] is None and dbz_rec.headers["event_version"] == b"1"
    assert relay_rec.partition == by_id[rows[0].event_id].partition == dbz_rec.partition  # key k1
    assert dbz_rec.key == "k1" and dbz_rec.value == JsonCodec().encode(rows[2])

    with psycopg.connect(cdc_db.dsn, autocommit=True) as conn:
        cp = take_checkpoint(conn)
        assert cp is not None and cp.seq >= 4  # three events and the handover's marker
        # Debezium confirms the LSN of the last change it streamed: a later change carries
        # the slot past the checkpoint (on an idle outbox it may stay just below it).
        with conn.transaction():
            writer.append(conn, [env("k2", 2, agg_type=cdc_db.agg_type)])
        wait_for(lambda: cdc_status(conn, cdc_db.slot).passed_seq >= cp.seq, 30, "the slot to pass the checkpoint")
        st = cdc_status(conn, cdc_db.slot)
        assert st.slot_exists and st.slot_active and st.unconfirmed <= 1 and st.lag_bytes >= 0, st
        retention = CdcRetention(lambda: psycopg.connect(cdc_db.dsn, autocommit=True), cdc_db.slot, keep_s=0)
        retention.run_once(conn)
        left = conn.execute("SELECT count(*) FROM outbox WHERE seq <= %s", (cp.seq,)).fetchone()[0]
        assert left == 0 and retention.deleted_total >= cp.seq
    st = outbox_status(cdc_db.dsn)
    assert st.publisher == "cdc" and st.cdc is not None and st.cdc.slot == cdc_db.slot
    out = CliRunner().invoke(outbox, ["status", "--dsn", cdc_db.dsn])
    assert out.exit_code == 0 and "publisher=cdc" in out.output and "lag_bytes=" in out.output, out.output


def test_an_idle_outbox_still_advances_the_slot_while_other_tables_write_wal(
        cdc_db: CdcDatabase, connect: ConnectClient, kafka_bootstrap: str) -> None:
    writer = OutboxWriter(JsonCodec())
    handover(cdc_db.dsn, to="cdc", slot=cdc_db.slot, bootstrap=kafka_bootstrap, connect=connect,
             connector=cdc_db.connector, connector_config=cdc_db.config, timeout_s=60)
    with psycopg.connect(cdc_db.dsn, autocommit=True) as conn:
        with conn.transaction():
            writer.append(conn, [env("idle", 1, agg_type=cdc_db.agg_type)])
        read_topics(kafka_bootstrap, [cdc_db.topic], expected=2, timeout_s=30)  # marker + the row
        # The outbox now stays idle; another table of the same database writes ~64 MB of WAL.
        conn.execute("CREATE TABLE unrelated (id bigserial PRIMARY KEY, filler text NOT NULL)")
        for _ in range(16):
            conn.execute("INSERT INTO unrelated (filler) SELECT repeat(md5(g::text), 32) "
                         "FROM generate_series(1, 3000) g")
        wait_for(lambda: cdc_status(conn, cdc_db.slot).lag_bytes < 4 * 2**20, 30,
                 "the slot of an idle outbox to follow other tables' WAL")
        take_checkpoint(conn)
        wait_for(lambda: cdc_status(conn, cdc_db.slot).unconfirmed == 0, 30,
                 "the last outbox rows to be confirmed while the outbox is idle")
        st = cdc_status(conn, cdc_db.slot)
        assert st.safe_wal_bytes is None or st.safe_wal_bytes > 0, st
