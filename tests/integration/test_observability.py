"""Integration: readiness checks and consumer-lag reading against the real Kafka and registry."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from casestream.cli_status import kafka_lag
from casestream.telemetry.readiness import dependency_checks

pytestmark = pytest.mark.integration


def test_dependency_checks_pass_against_the_running_infrastructure(
        kafka_bootstrap: str, registry_url: str) -> None:
    checks = dependency_checks(kafka_bootstrap, registry_url)
    assert set(checks) == {"kafka", "registry"}
    for check in checks.values():
        check()  # raises if the dependency is not reachable


def test_kafka_lag_is_high_watermark_minus_committed_offset(kafka_bootstrap: str) -> None:
    topic = f"obs-lag-{uuid.uuid4().hex[:8]}"
    group = f"obs-lag-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(5):
            producer.produce(topic, value=str(i).encode())
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        finally:
            consumer.close()
        lags = kafka_lag(kafka_bootstrap, [group, f"never-{group}"])
        assert lags[group] == 3
        assert lags.get(f"never-{group}", 0) == 0
    finally:
        admin.delete_topics([topic])[topic].result(15)
