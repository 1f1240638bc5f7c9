"""Fixtures shared by the integration tests (the infrastructure endpoints, ``pg_url`` & co.,
come from ``tests/conftest.py``).

Fixtures:
    private_schema -> (prefix, migrations) -> dsn   per test: a fresh schema of database
        ``casestream_test`` with ``migrations`` applied; dropped after the test.
    codec -> EnvelopeCodec   per module: prepared over the in-memory schema registry (for
        tests that only exercise the outbox's encoding); a module may define its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from casestream.catalog import load_catalog
from casestream.codec import EnvelopeCodec
from casestream.db import Migration, apply_migrations
from casestream.registry import InMemoryRegistry
from casestream.upcasters import default_upcasters

PrivateSchema = Callable[[str, Sequence[Migration | Path]], str]


@pytest.fixture
def private_schema(pg_url: str) -> Iterator[PrivateSchema]:
    """``private_schema(prefix, migrations)`` creates schema ``<prefix>_<10 hex digits>`` in
    ``casestream_test``, applies ``migrations`` there and returns a DSN whose
    ``search_path`` is that schema (each test its own tables, so tests never see each
    other's rows). Every schema it created is dropped, with its content, after the test."""
    base = make_conninfo(pg_url, dbname="casestream_test")
    created: list[str] = []

    def create(prefix: str, migrations: Sequence[Migration | Path]) -> str:
        schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        created.append(schema)
        options = (conninfo_to_dict(base).get("options") or "") + f" -csearch_path={schema}"
        scoped = make_conninfo(base, options=options.strip())
        apply_migrations(scoped, list(migrations))
        return scoped

    try:
        yield create
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            for schema in created:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="module")
def codec() -> EnvelopeCodec:
    """An :class:`EnvelopeCodec` prepared over :class:`InMemoryRegistry`."""
    c = EnvelopeCodec(load_catalog(), InMemoryRegistry(), default_upcasters())
    c.prepare(auto_register=True)
    return c
