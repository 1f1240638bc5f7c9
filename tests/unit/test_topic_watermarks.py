"""``casestream.kafka.topics.watermarks``: a retriable broker error (a leader moving after a
restart) is retried until the deadline; any other error is raised at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from casestream.kafka.topics import watermarks

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


class GroupClient:
    """Stands in for ``confluent_kafka.Consumer`` in ``committed_offsets``."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors, self.calls, self.closed = errors, 0, False

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]

    def close(self) -> None:
        self.closed = True


def _committed_with(monkeypatch: pytest.MonkeyPatch, client: GroupClient, timeout_s: float):
    from casestream.kafka import topics

    monkeypatch.setattr(topics, "Consumer", lambda conf: client)
    return topics.committed_offsets("127.0.0.1:1", "g", [("t", 0)], timeout_s)


def test_committed_offsets_retry_while_the_coordinator_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka reports NOT_COORDINATOR without the retriable flag: the code says it.
    moving = KafkaError(KafkaError.NOT_COORDINATOR, "Not coordinator", retriable=False)
    client = GroupClient([moving, KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)])
    assert _committed_with(monkeypatch, client, 5.0) == {("t", 0): 7}
    assert client.calls == 3 and client.closed


def test_committed_offsets_raise_a_permanent_error_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    client = GroupClient([KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied")])
    with pytest.raises(KafkaException):
        _committed_with(monkeypatch, client, 5.0)
    assert client.calls == 1 and client.closed


def test_committed_offsets_give_up_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    client = GroupClient([KafkaError(KafkaError.NOT_COORDINATOR)] * 1000)
    with pytest.raises(KafkaException):
        _committed_with(monkeypatch, client, 0.5)
    assert client.closed
