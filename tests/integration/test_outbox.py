"""Outbox writer, migrations and optimistic aggregate versions against the real PostgreSQL.

Each test works in its own schema (``isolated_schema``), so it can run beside others.
"""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from casestream.migrations import Migration, apply_migrations
from casestream.errors import ConcurrencyError, ConfigError
from casestream.outbox.writer import OUTBOX_MIGRATION, OutboxRowTooLarge, OutboxWriter, bump_version
from casestream.testing.relay import FakeEnvelope, JsonCodec, isolated_schema


@pytest.fixture
def base_dsn(pg_url: str) -> str:
    """``pg_url`` (server URL from tests/conftest.py) + ``/casestream_test``."""
    parts = urlsplit(pg_url)
    path = parts.path if parts.path not in ("", "/") else "/casestream_test"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


@pytest.fixture
def dsn(base_dsn: str):
    with isolated_schema(base_dsn, prefix="outbox_t") as scoped:
        yield scoped


def _env(agg: str, version: int, **kw) -> FakeEnvelope:
    return FakeEnvelope(aggregate_type="case", aggregate_id=agg, aggregate_version=version, **kw)


def test_migrations_are_idempotent_and_concurrent_safe(base_dsn: str, tmp_path: Path) -> None:
    extra = tmp_path / "002_things.sql"
    extra.write_text("CREATE TABLE things (id int PRIMARY KEY); INSERT INTO things VALUES (1);")
    with isolated_schema(base_dsn, prefix="mig_t", migrate=False) as scoped:
        results: list[list[str]] = []
        errors: list[BaseException] = []

        def apply() -> None:
            try:
                results.append(apply_migrations(scoped, [OUTBOX_MIGRATION, extra]))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=apply) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        # Exactly one caller applied both; the others found them recorded.
        assert sorted(map(len, results)) == [0, 0, 0, 2]
        assert apply_migrations(scoped, [OUTBOX_MIGRATION, extra]) == []
        with psycopg.connect(scoped) as conn:
            assert conn.execute("SELECT count(*) FROM things").fetchone()[0] == 1
            assert conn.execute("SELECT count(*) FROM outbox_relay_lease").fetchone()[0] == 32
        # An applied migration whose text changed is refused.
        with pytest.raises(ConfigError):
            apply_migrations(scoped, [Migration(name="002_things.sql", sql="SELECT 1")])
        # A failing migration leaves nothing behind.
        bad = Migration(name="003_bad", sql="CREATE TABLE t3 (id int); SELECT * FROM nope;")
        with pytest.raises(psycopg.errors.UndefinedTable):
            apply_migrations(scoped, [bad])
        with psycopg.connect(scoped) as conn:
            assert conn.execute("SELECT to_regclass('t3')").fetchone()[0] is None
            assert conn.execute("SELECT count(*) FROM casestream_migrations WHERE name = '003_bad'"
                                ).fetchone()[0] == 0


def test_append_commits_and_rolls_back_with_the_caller(dsn: str) -> None:
    writer = OutboxWriter(JsonCodec())
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            ids = writer.append(conn, [_env("c1", 1, traceparent="00-abc-def-01"), _env("c1", 2)])
        with pytest.raises(RuntimeError):
            with conn.transaction():
                writer.append(conn, [_env("c2", 1)])
                raise RuntimeError("command failed after appending")
        rows = conn.execute(
            "SELECT id, aggregatetype, aggregateid, type, aggregate_version, event_version, "
            "traceparent, status, shard, payload FROM outbox ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == ids
    assert [(r[2], r[4]) for r in rows] == [("c1", 1), ("c1", 2)]
    assert rows[0][6] == "00-abc-def-01" and rows[0][7] == "pending"
    assert 0 <= rows[0][8] < 32 and rows[0][8] == rows[1][8]  # one aggregate, one shard
    assert JsonCodec.decode(bytes(rows[1][9]))["v"] == 2


def test_append_refuses_an_event_no_message_could_hold(dsn: str) -> None:
    writer = OutboxWriter(JsonCodec())
    with psycopg.connect(dsn) as conn:
        with pytest.raises(OutboxRowTooLarge, match="TestHappened of case big"):
            with conn.transaction():
                writer.append(conn, [_env("big", 1, payload_size=2 * 1024 * 1024)])
        with conn.transaction():
            writer.append(conn, [_env("fits", 1, payload_size=900_000)])
        rows = conn.execute("SELECT aggregateid FROM outbox").fetchall()
    assert rows == [("fits",)]


def test_append_refuses_an_autocommit_connection_without_transaction(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(ValueError):
            OutboxWriter(JsonCodec()).append(conn, [_env("c1", 1)])
        with conn.transaction():
            OutboxWriter(JsonCodec()).append(conn, [_env("c1", 1)])


def test_insert_trigger_notifies_listeners(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN casestream_outbox")
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                OutboxWriter(JsonCodec()).append(conn, [_env("n1", 1), _env("n1", 2)])
        got = list(listener.notifies(timeout=5, stop_after=1))
    assert got and got[0].channel == "casestream_outbox"


def _race(n: int, command) -> tuple[int, int, list[BaseException]]:
    barrier = threading.Barrier(n)
    ok, conflicts, other = [0], [0], []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait()
            command()
            with lock:
                ok[0] += 1
        except ConcurrencyError:
            with lock:
                conflicts[0] += 1
        except BaseException as e:  # noqa: BLE001
            other.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok[0], conflicts[0], other


def test_twenty_concurrent_commands_at_one_version_one_wins(dsn: str) -> None:
    writer = OutboxWriter(JsonCodec())
    with psycopg.connect(dsn) as conn, conn.transaction():
        writer.append(conn, [_env("hot", v) for v in (1, 2, 3)], expected_version=0)

    def command() -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            writer.append(conn, [_env("hot", 4), _env("hot", 5)], expected_version=3)

    ok, conflicts, other = _race(20, command)
    assert other == []
    assert (ok, conflicts) == (1, 19)
    with psycopg.connect(dsn) as conn:
        versions = [r[0] for r in conn.execute(
            "SELECT aggregate_version FROM outbox WHERE aggregateid = 'hot' ORDER BY seq")]
        stream = conn.execute("SELECT version FROM outbox_aggregate_version "
                              "WHERE aggregateid = 'hot'").fetchone()[0]
    assert versions == [1, 2, 3, 4, 5]  # rows == successes' events, no gap, no duplicate
    assert stream == 5


def test_concurrent_creation_of_one_aggregate_one_wins(dsn: str) -> None:
    writer = OutboxWriter(JsonCodec())

    def create() -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            writer.append(conn, [_env("new", 1)], expected_version=0)

    ok, conflicts, other = _race(20, create)
    assert other == [] and (ok, conflicts) == (1, 19)


def test_bump_version_on_a_service_table(dsn: str) -> None:
    writer = OutboxWriter(JsonCodec())
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("CREATE TABLE cases (id text PRIMARY KEY, title text, version bigint NOT NULL)")
        conn.execute("INSERT INTO cases VALUES ('k1', 'old', 7)")

    def command() -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            new = bump_version(conn, table="cases", aggregate_type="case", aggregate_id="k1",
                               expected=7, set_columns={"title": "new"})
            writer.append(conn, [_env("k1", new)])

    ok, conflicts, other = _race(20, command)
    assert other == [] and (ok, conflicts) == (1, 19)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT title, version FROM cases").fetchone() == ("new", 8)
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] == 1
    with psycopg.connect(dsn) as conn:
        with pytest.raises(ConcurrencyError) as info:
            bump_version(conn, table="cases", aggregate_type="case", aggregate_id="k1", expected=7)
        assert (info.value.expected, info.value.actual) == (7, 8)


def test_expected_version_must_match_event_versions(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with pytest.raises(ValueError):
            OutboxWriter(JsonCodec()).append(conn, [_env("x", 3)], expected_version=0)
