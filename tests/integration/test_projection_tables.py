"""Projection tables on real PostgreSQL: the library's ``create_table_unless_exists`` and
``max_applied_at`` freshness, and the
case migration that brings a ``case_dashboard`` table of an earlier version up to date
without an ALTER TABLE where nothing is missing. One scratch database for the module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql

from casestream.migrations import Migration, apply_migrations, create_database
from casestream.handlers import ProjectionConfigError
from casestream.handlers import create_table_unless_exists, max_applied_at
from casestream.service.settings import CommonSettings
from services.case.adapters import dashboard
from services.case.bootstrap import MIGRATIONS

DASHBOARD_MIGRATION = Migration.from_file(MIGRATIONS / "004_dashboard_columns.sql")

#: case_dashboard as created before the officer/evidence/penalty/appeal columns.
OLD_DASHBOARD = """
CREATE TABLE case_dashboard (
    case_id text PRIMARY KEY, tenant_id text NOT NULL, status text NOT NULL, severity integer,
    priority text, outcome text, opened_at timestamptz, last_change timestamptz NOT NULL,
    last_event_type text NOT NULL, last_version bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""


@pytest.fixture(scope="module")
def dsn(pg_url: str) -> Iterator[str]:
    name = f"projtables_{uuid.uuid4().hex[:10]}"
    common = CommonSettings(pg_url=pg_url)
    create_database(common.database_url(name))
    try:
        yield common.database_url(name)
    finally:
        with psycopg.connect(common.database_url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _columns(conn: psycopg.Connection, table: str) -> dict[str, bool]:
    """column -> NOT NULL."""
    return dict(conn.execute(
        "SELECT attname, attnotnull FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped", (table,)).fetchall())


def test_max_applied_at_reads_the_named_table_and_names_an_unknown_one(dsn: str) -> None:
    fresh = max_applied_at("ledger")
    at = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in ("ledger", "ledger_shadow"):
            conn.execute(sql.SQL("CREATE TABLE {} (id int, applied_at timestamptz NOT NULL "
                                 "DEFAULT now())").format(sql.Identifier(t)))
        assert fresh(conn, {"ledger": "ledger"}) is None  # empty
        conn.execute("INSERT INTO ledger_shadow VALUES (1, %s), (2, %s)",
                     (at, datetime(2026, 1, 1, tzinfo=UTC)))
        assert fresh(conn, {"ledger": "ledger"}) is None  # the live table is still empty
        assert fresh(conn, {"ledger": "ledger_shadow"}) == at
        with pytest.raises(ProjectionConfigError, match="'ledger': not among the projection's tables"):
            fresh(conn, {"billing": "billing"})
        with pytest.raises(psycopg.errors.UndefinedColumn):
            max_applied_at("ledger", "written_at")(conn, {"ledger": "ledger"})


def test_create_table_unless_exists_runs_its_ddl_only_for_a_missing_table(dsn: str) -> None:
    ddl = ("CREATE TABLE {t} (id int PRIMARY KEY, note text)", "CREATE INDEX ON {t} (note)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert create_table_unless_exists(conn, "Notes Shadow", *ddl) is True  # quoted name
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'Notes Shadow'"
                            ).fetchone()[0] == 2
        conn.execute('INSERT INTO "Notes Shadow" VALUES (1, %s)', ("kept",))
        assert create_table_unless_exists(conn, "Notes Shadow", "DROP TABLE {t}", *ddl) is False
        assert conn.execute('SELECT note FROM "Notes Shadow"').fetchall() == [("kept",)]


def test_the_dashboard_migration_completes_an_old_table_and_leaves_a_current_one_unlocked(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(OLD_DASHBOARD)
        conn.execute("INSERT INTO case_dashboard VALUES ('c1', 't1', 'open', 2, 'high', NULL,"
                     " now(), now(), 'CaseOpened', 1)")
    apply_migrations(dsn, [DASHBOARD_MIGRATION])
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = _columns(conn, "case_dashboard")
        assert set(dashboard.COLUMNS) <= set(columns) and columns["status"] is False
        assert conn.execute("SELECT case_id, officer_id, appeal_state FROM case_dashboard"
                            ).fetchall() == [("c1", None, None)]
        # the current table (as create_tables makes it), read by an open transaction
        conn.execute("DROP TABLE case_dashboard")
        conn.execute("DELETE FROM casestream_migrations WHERE name = %s", (DASHBOARD_MIGRATION.name,))
        dashboard.create_tables(conn, dashboard.PROJECTION.live_names())
    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM case_dashboard").fetchone()  # ACCESS SHARE until rollback
        # an ALTER TABLE would wait for the reader: lock_timeout (libpq PGOPTIONS) makes it an error
        monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2000")
        apply_migrations(dsn, [DASHBOARD_MIGRATION])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM casestream_migrations WHERE name = %s",
                            (DASHBOARD_MIGRATION.name,)).fetchone()[0] == 1


def test_create_tables_leaves_an_existing_dashboard_table_unaltered(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS case_dashboard")
        conn.execute(OLD_DASHBOARD)
    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM case_dashboard").fetchone()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '2s'")
            dashboard.create_tables(conn, dashboard.PROJECTION.live_names())
            assert "officer_id" not in _columns(conn, "case_dashboard")  # the migration's job
