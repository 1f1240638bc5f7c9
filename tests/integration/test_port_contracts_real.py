"""The platform's port contracts (casestream.testing.contracts) on the real adapters:
``ConfluentSchemaRegistry`` against the registry of the dev stack, ``KafkaDeadLetters`` on
the broker (a topic per test), ``OutboxSink`` over ``OutboxWriter`` in a private PostgreSQL
schema. The same bodies run in memory in tests/unit/test_port_contracts.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from casestream.consumer import KafkaDeadLetters, Record
from casestream.consumer.deadletters import read_topic
from casestream.events import Envelope, EnvelopeCodec
from casestream.events.catalog import same_schema
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.kafka import client_config
from casestream.outbox import OUTBOX_MIGRATIONS, OutboxSink, OutboxWriter
from casestream.testing import create_topic
from casestream.testing.contracts import DEAD_LETTER_CONTRACT, OUTBOX_SINK_CONTRACT, REGISTRY_CONTRACT
from casestream.testing.relay import delete_topics
from tests.support.events import case_returned


class RealRegistryBackend:
    """Subjects under a namespace of its own, deleted (soft, then permanently) afterwards."""

    def __init__(self, url: str) -> None:
        self.registry = ConfluentSchemaRegistry(url, max_retries=1)
        self.prefix = f"contract{uuid.uuid4().hex[:10]}."

    def subject(self, name: str) -> str:
        return self.prefix + name

    def same_schema(self, a: Any, b: Any) -> bool:
        return same_schema(a, b)

    def close(self) -> None:
        client = self.registry._client  # the adapter's port has no delete (not a service's need)
        for subject in client.get_subjects():
            if subject.startswith(self.prefix):
                client.delete_subject(subject)
                client.delete_subject(subject, permanent=True)
        self.registry.close()


class KafkaDeadLetterBackend:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"contract-{uuid.uuid4().hex[:10]}"
        self.dlq = self.topic + ".dlq"
        create_topic(bootstrap, self.dlq)

    def sink(self) -> KafkaDeadLetters:
        return KafkaDeadLetters(client_config(self.bootstrap), self.dlq, "contract-consumer")

    def delivered(self) -> list[Record]:
        return read_topic(self.bootstrap, self.dlq)


class PgOutboxBackend:
    def __init__(self, dsn: str, codec: EnvelopeCodec) -> None:
        self.dsn, self.codec = dsn, codec
        self.writer = OutboxWriter(codec)

    @contextmanager
    def transaction(self) -> Iterator[OutboxSink]:
        with psycopg.connect(self.dsn) as conn:
            yield OutboxSink(self.writer, conn)

    def stored(self) -> list[Envelope]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
        return [self.codec.decode(bytes(r[0])) for r in rows]

    def event(self, aggregate_id: str, version: int) -> Envelope:
        return case_returned(aggregate_id, version)


@pytest.fixture
def registry_backend(registry_url: str) -> Iterator[RealRegistryBackend]:
    backend = RealRegistryBackend(registry_url)
    yield backend
    backend.close()


@pytest.fixture
def dead_letter_backend(kafka_bootstrap: str) -> Iterator[KafkaDeadLetterBackend]:
    backend = KafkaDeadLetterBackend(kafka_bootstrap)
    yield backend
    delete_topics(kafka_bootstrap, [backend.dlq])


@pytest.mark.parametrize("body", REGISTRY_CONTRACT, ids=lambda f: f.__name__)
def test_registry_contract_on_the_registry(registry_backend: RealRegistryBackend,
                                           body: Callable[[RealRegistryBackend], None]) -> None:
    body(registry_backend)


@pytest.mark.parametrize("body", DEAD_LETTER_CONTRACT, ids=lambda f: f.__name__)
def test_dead_letter_contract_on_kafka(dead_letter_backend: KafkaDeadLetterBackend,
                                       body: Callable[[KafkaDeadLetterBackend], None]) -> None:
    body(dead_letter_backend)


@pytest.mark.parametrize("body", OUTBOX_SINK_CONTRACT, ids=lambda f: f.__name__)
def test_outbox_sink_contract_on_postgresql(private_schema: Callable[..., str], codec: EnvelopeCodec,
                                            body: Callable[[PgOutboxBackend], None]) -> None:
    body(PgOutboxBackend(private_schema("outbox_c", OUTBOX_MIGRATIONS), codec))
