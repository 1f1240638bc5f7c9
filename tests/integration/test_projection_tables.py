"""Projection tables on real PostgreSQL: the library's ``max_applied_at`` freshness. One
scratch database for the module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql

from casestream.migrations import create_database
from casestream.replay import ReplayConfigError, max_applied_at
from casestream.service.settings import CommonSettings

pytestmark = pytest.mark.integration


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
        with pytest.raises(ReplayConfigError, match="'ledger': not among the projection's tables"):
            fresh(conn, {"billing": "billing"})
        with pytest.raises(psycopg.errors.UndefinedColumn):
            max_applied_at("ledger", "written_at")(conn, {"ledger": "ledger"})
