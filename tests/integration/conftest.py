"""Fixtures shared by the integration tests (the infrastructure endpoints, ``pg_url`` & co.,
come from ``tests/conftest.py``).

Fixtures:
    private_schema -> (prefix, migrations) -> dsn   per test: a fresh schema of database
        ``casestream_test`` with ``migrations`` applied; dropped after the test.
    codec -> EnvelopeCodec   per module: prepared over the in-memory schema registry (for
        tests that only exercise the outbox's encoding); a module may define its own.
    registry_codec -> EnvelopeCodec   per module: over the real registry when it takes the
        catalog, else in memory (``casestream.testing.consumer.real_codec``).
    consumer_harness -> (prefix) -> Harness   per test: a consumer-runtime test harness
        (``casestream.testing.consumer.Harness``) on ``registry_codec``; closed after the test.
    private_kafka -> PrivateKafka   per test: a private single-node broker that the test may
        kill and start again (``casestream.testing.relay.PrivateKafka``); one broker for the
        session, started again before a test when the test before left it down.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.testing.consumer import Harness, close_codec, real_codec
from casestream.migrations import Migration, apply_migrations
from casestream.events.registry import InMemoryRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec
from casestream.testing.relay import PrivateKafka
from tests.support.suite import private_broker

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
    c = open_codec(load_catalog(schemas_dir()), InMemoryRegistry(), auto_register=None)
    c.prepare(auto_register=True)
    return c


@pytest.fixture(scope="module")
def registry_codec(registry_url: str) -> Iterator[Any]:
    """The real EnvelopeCodec: real registry if it takes the catalog, else an in-memory one."""
    c = real_codec(registry_url, fallback=True)
    yield c
    close_codec(c)


@pytest.fixture
def consumer_harness(kafka_bootstrap: str, pg_url: str, registry_url: str,
                     registry_codec: Any) -> Iterator[Callable[..., Harness]]:
    """``consumer_harness(prefix="test.consumer")`` -> a :class:`Harness` (topics and tables named after
    ``prefix``); every harness made is closed after the test."""
    made: list[Harness] = []

    def create(prefix: str = "test.consumer") -> Harness:
        h = Harness.create(kafka_bootstrap, pg_url, codec=registry_codec,
                           registry_url=registry_url, prefix=prefix)
        made.append(h)
        return h

    try:
        yield create
    finally:
        for h in made:
            h.close()


@pytest.fixture(scope="session")
def _private_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    with private_broker(tmp_path_factory, "private-kafka") as broker:
        yield broker


@pytest.fixture
def private_kafka(_private_kafka_broker: PrivateKafka) -> PrivateKafka:
    """The session's private broker, running (see the module docstring)."""
    if _private_kafka_broker.proc is None:
        _private_kafka_broker.start()
    return _private_kafka_broker
