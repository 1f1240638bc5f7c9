"""The dev stack creates the topics every installed service declares (real Kafka)."""

from __future__ import annotations

import os

import pytest
from confluent_kafka.admin import AdminClient

from casestream.service import ServiceStack, discovery


def test_the_dev_stack_creates_every_declared_topic(kafka_bootstrap: str) -> None:
    declared = {t.name: t for spec in discovery.services().values() for t in spec.topics}
    assert "outbox.event.watch" in declared  # a team's topic, not only the suite's
    ServiceStack(env={**os.environ, "CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}).create_topics()
    listed = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert {name: name in listed and len(listed[name].partitions) >= spec.partitions
            for name, spec in declared.items()} == dict.fromkeys(declared, True)
