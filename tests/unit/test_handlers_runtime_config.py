"""Unit tests of ConsumerRuntime's configuration checks (no I/O happens before ``run``)."""

from __future__ import annotations

from typing import Any

import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers.registry import HandlerRegistry


def _runtime(**kafka: Any) -> ConsumerRuntime:
    return ConsumerRuntime("audit.journal", ["outbox.event.case"], HandlerRegistry(),
                           codec=object(), pool=object(), kafka_config=kafka,  # type: ignore[arg-type]
                           settings=ConsumerSettings())


def test_offsets_are_never_auto_committed() -> None:
    rt = _runtime(**{"bootstrap.servers": "b:9092", "enable.auto.offset.store": True})
    assert rt._conf["enable.auto.commit"] is False
    assert rt._conf["enable.auto.offset.store"] is False
    assert rt._conf["group.id"] == "audit.journal"
    assert rt.topics == ["outbox.event.case", "audit.journal.redrive"]
    with pytest.raises(ConfigError, match="enable.auto.commit"):
        _runtime(**{"bootstrap.servers": "b:9092", "enable.auto.commit": "true"})


def test_subscribed_topics_are_looked_up_every_5_s_unless_the_config_says_otherwise() -> None:
    # librdkafka's default (300 s) left a topic created after the subscription unread for minutes
    assert _runtime(**{"bootstrap.servers": "b:9092"})._conf["topic.metadata.refresh.interval.ms"] == 5000
    mine = _runtime(**{"bootstrap.servers": "b:9092", "topic.metadata.refresh.interval.ms": 60000})
    assert mine._conf["topic.metadata.refresh.interval.ms"] == 60000
    assert mine._kafka_connection()["topic.metadata.refresh.interval.ms"] == 60000


@pytest.mark.parametrize("kafka", [{}, {"bootstrap.servers": "b:9092",
                                        "group.protocol": "consumer"}])
def test_bad_kafka_config_is_refused(kafka: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _runtime(**kafka)


def test_no_topics_is_refused() -> None:
    with pytest.raises(ConfigError):
        ConsumerRuntime("c", [], HandlerRegistry(), object(), object(),  # type: ignore[arg-type]
                        {"bootstrap.servers": "b:9092"})
