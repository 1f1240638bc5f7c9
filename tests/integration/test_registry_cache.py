"""The registry adapter is a correct cache against the real registry: a subject deleted, a new
version or a compatibility change made by another client is seen (writes always reach the
registry, a 404 drops the cache, reads are cached for a bounded time)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from casestream.errors import UnknownSchemaError
from casestream.events.registry import ConfluentSchemaRegistry


def record(ns: str, *fields: str) -> dict[str, Any]:
    return {"type": "record", "name": "Probe", "namespace": ns,
            "fields": [{"name": f, "type": "string", "default": ""} for f in fields]}


@pytest.fixture
def subject(registry_url: str) -> Iterator[str]:
    ns = f"cachetest{uuid.uuid4().hex[:10]}"
    yield f"{ns}.Probe"
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with SchemaRegistryClient({"url": registry_url}) as client:
        for s in client.get_subjects():
            if s.startswith(ns):
                client.delete_subject(s)
                client.delete_subject(s, permanent=True)


@pytest.fixture
def other(registry_url: str) -> Iterator[Any]:
    """Another client of the same registry (an operator, another service)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with SchemaRegistryClient({"url": registry_url}) as client:
        yield client


def test_register_after_a_delete_reaches_the_registry(registry_url: str, subject: str, other: Any) -> None:
    schema = record(subject.rpartition(".")[0], "a")
    with ConfluentSchemaRegistry(registry_url, max_retries=1) as reg:
        reg.register(subject, schema)
        other.delete_subject(subject)
        other.delete_subject(subject, permanent=True)
        assert subject not in other.get_subjects()
        reg.register(subject, schema)
        assert subject in other.get_subjects()
        assert len(reg.versions(subject)) == 1


def test_lookup_sees_a_delete_after_the_ttl(registry_url: str, subject: str, other: Any) -> None:
    schema = record(subject.rpartition(".")[0], "a")
    with ConfluentSchemaRegistry(registry_url, max_retries=1, cache_ttl=1.0) as reg:
        reg.register(subject, schema)
        reg.lookup(subject, schema)
        other.delete_subject(subject)
        other.delete_subject(subject, permanent=True)
        time.sleep(1.2)
        with pytest.raises(UnknownSchemaError):
            reg.lookup(subject, schema)


def test_default_read_ttl_is_bounded(registry_url: str) -> None:
    with ConfluentSchemaRegistry(registry_url) as reg:
        assert 0 < reg.cache_ttl <= 300


def test_versions_see_a_subject_recreated_by_another_client(registry_url: str, subject: str, other: Any) -> None:
    from confluent_kafka.schema_registry import Schema

    ns = subject.rpartition(".")[0]
    first, second = record(ns, "a"), record(ns, "b")
    with ConfluentSchemaRegistry(registry_url, max_retries=1, cache_ttl=1.0) as reg:
        reg.register(subject, first)
        assert [v.schema for v in reg.versions(subject)] == [first]
        other.delete_subject(subject)
        other.delete_subject(subject, permanent=True)
        import json

        other.register_schema(subject, Schema(json.dumps(second), "AVRO"))
        time.sleep(1.2)
        assert [v.schema["fields"][0]["name"] for v in reg.versions(subject)] == ["b"]


def test_a_404_drops_the_cache(registry_url: str, subject: str, other: Any) -> None:
    ns = subject.rpartition(".")[0]
    first = record(ns, "a")
    with ConfluentSchemaRegistry(registry_url, max_retries=1) as reg:
        reg.register(subject, first)
        reg.lookup(subject, first)
        other.delete_subject(subject)
        other.delete_subject(subject, permanent=True)
        with pytest.raises(UnknownSchemaError):
            reg.lookup(subject, record(ns, "zzz"))  # not cached: asks, gets a 404
        with pytest.raises(UnknownSchemaError):
            reg.lookup(subject, first)  # the 404 dropped the stale entry


def test_compatibility_change_is_seen(registry_url: str, subject: str, other: Any) -> None:
    ns = subject.rpartition(".")[0]
    with ConfluentSchemaRegistry(registry_url, max_retries=1, cache_ttl=1.0) as reg:
        reg.register(subject, record(ns, "a"))
        reg.set_compatibility(subject, "BACKWARD")
        assert reg.get_compatibility(subject) == "BACKWARD"
        other.set_compatibility(subject_name=subject, level="FULL_TRANSITIVE")
        time.sleep(1.2)
        assert reg.get_compatibility(subject) == "FULL_TRANSITIVE"
