"""Shared helpers of the case and audit integration tests (no tests here).

- :func:`schema_dsn_for`: a fresh PostgreSQL schema in the test database, as a DSN whose
  ``search_path`` points at it (dropped afterwards), so these tests run beside others.
- :func:`memory_codec`: the real Avro codec and catalog over an in-memory schema registry.
- :func:`record_of`: a Kafka record as the consumer runtime would receive it.
- :func:`pg_fixtures`: the module fixtures ``dsn`` (a migrated schema), ``codec`` and ``pool``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.consumer.records import Record
from casestream.events.envelope import Envelope
from casestream.events.registry import InMemoryRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec
from casestream.consumer.inbox import ensure_schema
from casestream.migrations import Migration, apply_migrations

TEST_DATABASE = "casestream_test"


def server_url(request: pytest.FixtureRequest) -> str:
    """The PostgreSQL server URL: the suite's ``pg_url`` fixture (tests/conftest.py), which
    fails with set-up instructions when CASESTREAM_PG_URL is unset or nothing answers."""
    try:
        return str(request.getfixturevalue("pg_url"))
    except pytest.FixtureLookupError:  # only if run without the suite's conftest
        return os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432")


def database_url_for(request: pytest.FixtureRequest) -> str:
    """The test database URL (``casestream_test`` unless the URL names one); fails if down."""
    parts = urlsplit(server_url(request))
    if parts.path in ("", "/"):
        parts = parts._replace(path=f"/{TEST_DATABASE}")
    url = urlunsplit(parts)
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL test database not reachable at {url}: {e} "
                    "(deploy/infra.sh up creates it)", pytrace=False)
    return url


@contextmanager
def schema_dsn_for(url: str, prefix: str) -> Iterator[str]:
    """Create schema ``<prefix>_<random>`` and yield ``url`` with ``search_path`` set to it."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    parts = urlsplit(url)
    option = quote(f"-csearch_path={schema}")
    query = f"{parts.query}&options={option}" if parts.query else f"options={option}"
    try:
        yield urlunsplit(parts._replace(query=query))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def memory_codec() -> EnvelopeCodec:
    """The real codec (catalog from ``schemas/``, upcasters) over an in-memory registry."""
    codec = open_codec(load_catalog(schemas_dir()), InMemoryRegistry(), auto_register=None)
    codec.prepare(auto_register=True)
    return codec


def record_of(codec: EnvelopeCodec, env: Envelope, *, offset: int,
              published_at: datetime | None = None, partition: int = 0) -> Record:
    """The Kafka record carrying ``env`` on its topic (key = aggregate id, contract headers)."""
    ts = int((published_at or env.occurred_at).timestamp() * 1000)
    return Record(topic=codec.topic_for(env), partition=partition, offset=offset,
                  key=env.aggregate_id.encode(), value=codec.encode(env),
                  headers=tuple(codec.headers(env)), timestamp_ms=ts)


def pg_fixtures(prefix: str, migrations: Callable[[], Sequence[Migration | Path]], *, inbox: bool = False,
                pool_size: int = 4) -> tuple[Any, Any, Any]:
    """Module-scoped fixtures ``dsn``, ``codec`` and ``pool``, to assign as
    ``dsn, codec, pool = pg_fixtures(...)`` in a test module.

    ``dsn`` is a fresh schema ``<prefix>_<random>`` with ``migrations()`` applied (asserted to
    apply, then to be idempotent) and, with ``inbox``, the consumer inbox tables; ``codec`` is
    :func:`memory_codec`; ``pool`` a connection pool of at most ``pool_size`` over ``dsn``.
    """

    @pytest.fixture(scope="module", name="dsn")
    def dsn(request: pytest.FixtureRequest) -> Iterator[str]:
        with schema_dsn_for(database_url_for(request), prefix) as scoped:
            assert apply_migrations(scoped, migrations())
            assert apply_migrations(scoped, migrations()) == []  # idempotent
            if inbox:
                with psycopg.connect(scoped) as conn:
                    ensure_schema(conn)
            yield scoped

    @pytest.fixture(scope="module", name="codec")
    def codec() -> EnvelopeCodec:
        return memory_codec()

    @pytest.fixture(scope="module", name="pool")
    def pool(dsn: str) -> Iterator[ConnectionPool[Any]]:
        with ConnectionPool(dsn, min_size=1, max_size=pool_size, timeout=5, open=True) as p:
            yield p

    return dsn, codec, pool
