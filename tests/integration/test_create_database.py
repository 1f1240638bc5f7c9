"""casestream.migrations.create_database against the real PostgreSQL (dev-stack provisioning)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from casestream.errors import ConfigError
from casestream.migrations import create_database


def test_creates_a_missing_database_once(pg_url: str) -> None:
    name = f"cs_provision_{uuid.uuid4().hex[:8]}"
    dsn = make_conninfo(pg_url, dbname=name)
    try:
        assert create_database(dsn) is True
        assert create_database(dsn) is False  # idempotent
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (name,)
    finally:
        with psycopg.connect(make_conninfo(pg_url, dbname="postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_a_dsn_without_a_database_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="names no database"):
        create_database("host=127.0.0.1 port=1")


def test_an_unreachable_server_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot create database 'x'"):
        create_database("postgresql://postgres@127.0.0.1:1/x?connect_timeout=2")
