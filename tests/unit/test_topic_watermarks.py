"""``casestream.kafka.topics.watermarks``: a retriable broker error (a leader moving after a
restart) is retried until the deadline; any other error is raised at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from casestream.kafka.topics import watermarks

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)


class Client:
    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors, self.calls = errors, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return (3, 9)


def test_a_retriable_error_is_retried() -> None:
    moving = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Not leader", retriable=True)
    client = Client([moving, moving])
    assert watermarks(client, TP, 5.0) == (3, 9)
    assert client.calls == 3


def test_a_permanent_error_is_raised_at_once() -> None:
    client = Client([KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "unknown", retriable=False)])
    with pytest.raises(KafkaException):
        watermarks(client, TP, 5.0)
    assert client.calls == 1


def test_a_retriable_error_past_the_deadline_is_raised() -> None:
    moving = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Not leader", retriable=True)
    with pytest.raises(KafkaException):
        watermarks(Client([moving] * 1000), TP, 0.3)
