"""``casestream migrate``: an installed service's migrations applied before it starts, and a
service told not to migrate at start (``CASESTREAM_MIGRATE_AT_START=false``) leaving its
database alone. Real PostgreSQL; the watch example is the installed service."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from casestream.cli.main import main
from casestream.migrations import create_database
from casestream.service import ServiceBuilder
from casestream.service.settings import CommonSettings
from services import schemas_dir
from watch import SCHEMAS, SERVICE
from watch.settings import WatchSettings


@pytest.fixture
def fresh_database(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty database named by CASESTREAM_WATCH_DATABASE; dropped after the test."""
    name = f"migrate_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("CASESTREAM_PG_URL", pg_url)
    monkeypatch.setenv("CASESTREAM_WATCH_DATABASE", name)
    dsn = CommonSettings(pg_url=pg_url).database_url(name)
    create_database(dsn)
    try:
        yield dsn
    finally:
        with psycopg.connect(CommonSettings(pg_url=pg_url).database_url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}


def test_migrate_applies_once_then_reports_up_to_date(fresh_database: str) -> None:
    first = CliRunner().invoke(main, ["migrate", "watch"])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("watch: applied ") and "001_" in first.output
    assert "outbox" in _tables(fresh_database)
    again = CliRunner().invoke(main, ["migrate", "watch"])
    assert again.exit_code == 0 and again.output == "watch: up to date\n", again.output


def test_migrate_names_an_unknown_service_and_a_missing_database(
        fresh_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = CliRunner().invoke(main, ["migrate", "nope"])
    assert unknown.exit_code == 2 and "unknown service nope" in unknown.output
    monkeypatch.setenv("CASESTREAM_WATCH_DATABASE", "no_such_database_here")
    missing = CliRunner().invoke(main, ["migrate", "watch"])
    assert missing.exit_code == 2, missing.output
    assert "database does not exist" in missing.output and "Traceback" not in missing.output


def test_a_service_told_not_to_migrate_at_start_leaves_its_database_alone(
        fresh_database: str, registry_url: str, kafka_bootstrap: str) -> None:
    settings = WatchSettings(migrate_at_start=False, registry_url=registry_url,
                             kafka_bootstrap=kafka_bootstrap)
    b = ServiceBuilder(SERVICE, settings, schemas=[schemas_dir(), SCHEMAS]).start()
    try:
        assert _tables(fresh_database) == set()
    finally:
        b.codec.close()
        b.pool.close()
    migrated = WatchSettings(registry_url=registry_url, kafka_bootstrap=kafka_bootstrap)
    b = ServiceBuilder(SERVICE, migrated, schemas=[schemas_dir(), SCHEMAS]).start()
    try:
        assert "outbox" in _tables(fresh_database)
    finally:
        b.codec.close()
        b.pool.close()
