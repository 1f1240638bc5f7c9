"""A dead letter can always be written, on the real Kafka broker.

The broker's default ``max.message.bytes`` is 1,048,588 bytes, librdkafka's default
``message.max.bytes`` 1,000,000: a message between the two is accepted by its topic but
could not be dead-lettered by a producer left at the default, so the consumer retried it
forever and nothing behind it on the partition was processed. Here such a message is
dead-lettered whole; one larger than the dead-letter topic allows is dead-lettered as a
reference (position, size, SHA-256, reason), and the partition moves on in both cases.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from casestream.consumer.deadletters import DeadLetter, DeadLetterError, KafkaDeadLetters
from casestream.consumer.deadletters import read_topic, redrive
from casestream.consumer.records import Record
from casestream.testing.consumer import Harness, create_topic, wait_until
from casestream.testing.consumer import produce_events
from tests.support.events import case_returned

BETWEEN_LIMITS = 1_000_100  # over librdkafka's 1,000,000, under the topic's 1,048,588


def _topic(bootstrap: str, name: str, max_message_bytes: int | None = None) -> str:
    config = {"max.message.bytes": str(max_message_bytes)} if max_message_bytes else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures resolve
    futures = admin.create_topics([NewTopic(name, 1, 1, config=config)])
    for future in futures.values():
        future.result(30)
    return name


def _produce_large(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 3_000_000})
    errors: list[Any] = []
    producer.produce(topic, key=key, value=value,
                     on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors


def _dead_letter(record: Record) -> DeadLetter:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return DeadLetter(record=record, error_class="casestream.errors.PoisonMessageError",
                      reason="bad_magic_byte", message="not Confluent framing", attempts=1,
                      first_failure=now, last_failure=now, event_id="e-1", event_type="X")


def _record(topic: str, value: bytes, offset: int = 7) -> Record:
    return Record(topic=topic, partition=0, offset=offset, key=b"K", value=value,
                  headers=(("id", b"e-1"), ("big", b"h" * 4000)), timestamp_ms=None)


def test_a_message_between_the_client_and_topic_defaults_is_dead_lettered_whole(
        kafka_bootstrap: str) -> None:
    dlq = _topic(kafka_bootstrap, f"edge.dlq-whole-{uuid.uuid4().hex[:8]}.dlq")
    sink = KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap}, dlq, "edge.whole")
    value = b"\x07" + b"v" * (BETWEEN_LIMITS - 1)
    sink.send(_dead_letter(_record("source", value)))
    sink.flush()
    assert sink.max_message_bytes == 1_048_588 and sink.references == 0
    [dl] = read_topic(kafka_bootstrap, dlq)
    assert dl.value == value and dl.header("dlq.error.reason") == "bad_magic_byte"


def test_a_message_too_large_for_the_dead_letter_topic_is_dead_lettered_as_a_reference(
        kafka_bootstrap: str) -> None:
    dlq = _topic(kafka_bootstrap, f"edge.dlq-ref-{uuid.uuid4().hex[:8]}.dlq")
    value = b"\x07" + b"v" * 1_500_000
    for sink in (KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap}, dlq, "edge.ref"),
                 # a limit configured above the topic's: the broker refuses, the reference follows
                 KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap}, dlq, "edge.ref",
                                  max_message_bytes=2_000_000)):
        sink.send(_dead_letter(_record("big.source", value)))
        sink.flush()
        assert sink.references == 1
    refs = read_topic(kafka_bootstrap, dlq)
    assert len(refs) == 2
    for ref in refs:
        assert ref.value is None and ref.key == b"K"
        assert ref.header("dlq.reference") == "true"
        assert ref.header("dlq.reference.reason") == "too_large"
        assert ref.header("dlq.original.topic") == "big.source"
        assert ref.header("dlq.original.offset") == "7"
        assert ref.header("dlq.original.size") == str(len(value))
        assert ref.header("dlq.original.sha256") == hashlib.sha256(value).hexdigest()
        assert ref.header("dlq.error.reason") == "bad_magic_byte" and ref.header("id") == "e-1"
        assert ref.header("big") is None
    with pytest.raises(DeadLetterError, match=r"big.source\[0\]@7"):
        redrive(kafka_bootstrap, refs, f"{dlq}.redrive")


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.dlq-limits")


def test_the_partition_moves_on_past_a_message_over_a_million_bytes(env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    after = case_returned("K", 1)
    rt = env.start(env.runtime(env.settings()))
    _produce_large(env.bootstrap, env.topic, b"K", b"\x07" + b"p" * (BETWEEN_LIMITS - 1))
    produce_events(env.bootstrap, env.topic, env.codec, [after], partition=0)
    [dl] = env.dead_letters(1)
    assert len(dl.value) == BETWEEN_LIMITS and dl.header("dlq.error.reason") == "bad_magic_byte"
    wait_until(lambda: env.versions("K") == [1])  # the event behind it was processed
    assert rt.stats.dead_lettered == 1
