"""A consumer started while Kafka is unreachable waits for it (creating its dead-letter and
re-drive topics again) instead of ending the service process; other Kafka errors still end it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from casestream.consumer import runtime
from casestream.consumer.runtime import ConsumerRuntime


def _consumer() -> Any:
    return SimpleNamespace(name="watch.cases", dlq_topic="watch.cases.dlq", redrive_topic="watch.cases.redrive",
                           _kafka_connection=lambda: {"bootstrap.servers": "127.0.0.1:1"})


def _ensure(monkeypatch: pytest.MonkeyPatch, outcomes: list[BaseException | None]) -> list[list[str]]:
    calls: list[list[str]] = []

    def ensure_topics(conf: dict[str, Any], topics: list[str]) -> None:
        calls.append(topics)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(runtime, "ensure_topics", ensure_topics)
    return calls


def test_an_unreachable_kafka_is_waited_for(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls = _ensure(monkeypatch, [TimeoutError("15 s"), None])
    assert ConsumerRuntime._ensure_dead_letter_topics(_consumer(), threading.Event()) is True
    assert calls == [["watch.cases.dlq", "watch.cases.redrive"]] * 2
    assert "watch.cases: Kafka unreachable (TimeoutError)" in caplog.text


def test_a_transport_error_is_waited_for_until_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))
    calls = _ensure(monkeypatch, [down])
    stop = threading.Event()
    stop.set()  # the service stops while Kafka is still away
    assert ConsumerRuntime._ensure_dead_letter_topics(_consumer(), stop) is False
    assert len(calls) == 1


def test_any_other_kafka_error_ends_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized"))
    _ensure(monkeypatch, [denied])
    with pytest.raises(KafkaException, match="not authorized"):
        ConsumerRuntime._ensure_dead_letter_topics(_consumer(), threading.Event())
