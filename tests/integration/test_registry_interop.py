"""Interoperability proof: messages written by casestream's codec are read by Confluent's stock
``AvroDeserializer`` with a plain ``SchemaRegistryClient`` — no casestream code on the reading side.

Two paths: the bytes directly, and through Kafka (our key, headers and value produced to a
topic, read back by a plain ``confluent_kafka.Consumer``). Isolated subjects (``itest<hex>.*``)
and topic; both deleted afterwards.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from casestream.events.catalog import Catalog, load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.events.registry import ConfluentSchemaRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec

OCCURRED = datetime(2026, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)


@pytest.fixture
def setup(tmp_path: Path, registry_url: str) -> Iterator[tuple[Catalog, EnvelopeCodec]]:
    ns = f"itest{uuid.uuid4().hex[:10]}"
    dst = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), dst)
    for p in [*dst.rglob("*.avsc"), dst / "catalog.toml"]:
        p.write_text(p.read_text().replace('"casestream.', f'"{ns}.'))
    toml = dst / "catalog.toml"
    toml.write_text(toml.read_text().replace('namespace = "casestream"', f'namespace = "{ns}"'))
    catalog = load_catalog(dst)
    with ConfluentSchemaRegistry(registry_url) as registry:
        codec = open_codec(catalog, registry, auto_register=None)
        codec.prepare(auto_register=True)
        yield catalog, codec
    with SchemaRegistryClient({"url": registry_url}) as client:
        for s in client.get_subjects():
            if s.startswith(ns + "."):
                client.delete_subject(s)
                client.delete_subject(s, permanent=True)


def events() -> list[Envelope]:
    case_id = str(uuid.uuid4())
    common = dict(aggregate_type="case", aggregate_id=case_id, tenant_id="tenant-1", source="case",
                  actor_id="officer-1", correlation_id=case_id, occurred_at=OCCURRED)
    base = {"title": "Waste", "severity": 4, "evidence_count": 2, "reporter_email": "r@example.org"}
    return [
        new_event(event_type="CaseOpened", event_version=1, aggregate_version=1,
                  payload={**base, "description": "  two   barrels "}, **common),
        new_event(event_type="CaseOpened", event_version=2, aggregate_version=2,
                  payload={**base, "description": "two barrels", "priority": "HIGH"}, **common),
        new_event(event_type="CaseOpened", aggregate_version=3, traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
                  payload={**base, "summary": "two barrels", "priority": "LOW"}, causation_id=str(uuid.uuid4()),
                  **common),
        new_event(event_type="CaseClosed", aggregate_version=4, payload={"outcome": "no_violation",
                                                                         "penalty_cents": None}, **common),
    ]


def assert_plain_record(rec: dict[str, Any], env: Envelope, version: int) -> None:
    assert str(rec["event_id"]) == env.event_id  # logicalType uuid -> uuid.UUID in the stock deserializer
    assert rec["event_type"] == env.event_type and rec["event_version"] == version
    for k in ("source", "tenant_id", "aggregate_type", "aggregate_id", "aggregate_version", "correlation_id",
              "causation_id", "traceparent", "actor_id"):
        assert rec[k] == getattr(env, k), k
    assert rec["occurred_at"] == OCCURRED and rec["published_at"] is None
    assert rec["payload"] == dict(env.payload)  # the typed payload of the version that was written


def test_stock_avro_deserializer_reads_our_bytes(setup: tuple[Catalog, EnvelopeCodec], registry_url: str) -> None:
    catalog, codec = setup
    with SchemaRegistryClient({"url": registry_url}) as client:
        deserializer = AvroDeserializer(client)
        for env in events():
            topic = codec.topic_for(env)
            rec = deserializer(codec.encode(env), SerializationContext(topic, MessageField.VALUE))
            assert_plain_record(rec, env, env.event_version or catalog.newest_version(env.event_type))


def test_stock_consumer_reads_our_messages_through_kafka(
    setup: tuple[Catalog, EnvelopeCodec], registry_url: str, kafka_bootstrap: str
) -> None:
    catalog, codec = setup
    topic = f"itest.interop.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)
    try:
        sent = events()
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
        for env in sent:
            producer.produce(topic, key=codec.key_for(env), value=codec.encode(env), headers=codec.headers(env))
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"itest-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        with SchemaRegistryClient({"url": registry_url}) as client:
            deserializer = AvroDeserializer(client)
            while len(got) < len(sent) and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                rec = deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE))
                got.append((msg, rec))
        consumer.close()
        assert len(got) == len(sent)
        for env, (msg, rec) in zip(sent, got, strict=True):
            version = env.event_version or catalog.newest_version(env.event_type)
            assert_plain_record(rec, env, version)
            assert msg.key() == env.aggregate_id.encode()
            headers = dict(msg.headers())
            assert headers["id"] == env.event_id.encode() and headers["type"] == env.event_type.encode()
            assert headers["event_version"] == str(version).encode()
            # and our own codec reads the same message upcast to the newest version
            ts_type, ts_ms = msg.timestamp()
            ours = codec.decode(msg.value(), published_at=datetime.fromtimestamp(ts_ms / 1000, UTC))
            assert ours.event_version == catalog.newest_version(env.event_type)
            assert ours.published_at is not None
        assert got[0][1]["payload"]["description"] == "  two   barrels "
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
