"""How one relay batch sorts its rows: sizes against the topic limit, size rejections by
the broker, bounded attempts (in-memory producer; no broker)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from casestream.kafka.topics import RECORD_BATCH_OVERHEAD, record_batch_size, record_batch_size_at_most
from casestream.outbox.relay import RelaySettings
from casestream.outbox.relay.batch import InFlightBatch
from casestream.outbox.relay.store import OutboxRow

TOPIC = "outbox.event.case"


def _row(seq: int, agg: str, size: int = 100, attempts: int = 0) -> OutboxRow:
    return OutboxRow(id=f"00000000-0000-0000-0000-{seq:012d}", aggregatetype="case", aggregateid=agg,
                     type="CaseOpened", payload=b"x" * size, event_version=1, traceparent=None,
                     correlation_id=None, attempts=attempts, seq=seq)


class _Msg:
    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


class ReportingProducer:
    """Answers the n-th produce call at once with error code ``errors[n]`` (None or past the
    list: delivered)."""

    def __init__(self, errors: list[int | None]) -> None:
        self.errors = errors
        self.sent: list[str] = []
        self.purged = 0

    def produce(self, topic: str, *, value: bytes, key: bytes, headers: Any, on_delivery: Any) -> None:
        n = len(self.sent)
        self.sent.append(key.decode())
        code = self.errors[n] if n < len(self.errors) else None
        on_delivery(None if code is None else KafkaError(code), _Msg())

    def poll(self, timeout: float = 0) -> int:
        return 0

    def purge(self, **kw: Any) -> None:
        self.purged += 1


def _run(rows: list[OutboxRow], producer: ReportingProducer, limit: int = 1_048_588):
    batch = InFlightBatch(rows, full=False, topic_prefix="outbox.event.")
    batch.produce(producer, "r", 0.01, limits={TOPIC: limit})
    assert batch.done
    return batch.outcomes(RelaySettings().retry, "r")


def test_a_row_too_large_for_the_topic_is_refused_alone_and_holds_its_aggregate() -> None:
    producer = ReportingProducer([])
    out = _run([_row(1, "big", size=5000), _row(2, "big"), _row(3, "other")], producer, limit=4000)
    assert producer.sent == ["other"]
    assert [f[0][-1] for f in out.failed] == ["1"]
    assert "exceeds max.message.bytes=4000 of topic outbox.event.case" in out.failed[0][1]
    assert len(out.delivered) == 1 and not out.retry


def test_a_broker_size_rejection_of_a_row_that_fits_alone_is_retried_not_failed() -> None:
    producer = ReportingProducer([KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.MSG_SIZE_TOO_LARGE])
    out = _run([_row(1, "a"), _row(2, "b")], producer)
    assert not out.failed and len(out.retry) == 2
    assert "rejected the record batch holding this row" in out.retry[0][2]
    assert out.rejected_topics == {TOPIC}


def test_a_retryable_error_gives_up_after_max_attempts_and_says_so() -> None:
    limit = RelaySettings().retry.max_attempts
    assert limit is not None
    producer = ReportingProducer([KafkaError.REQUEST_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT])
    out = _run([_row(1, "a", attempts=limit - 1), _row(2, "b", attempts=limit - 2)], producer)
    assert [r[0][-1] for r in out.retry] == ["2"]
    assert len(out.failed) == 1 and out.gave_up == 1
    assert out.failed[0][1].startswith(f"gave up after {limit} attempts (max_attempts): REQUEST_TIMED_OUT")


def test_an_order_breach_names_the_real_cause(caplog: pytest.LogCaptureFixture) -> None:
    producer = ReportingProducer([KafkaError.MSG_SIZE_TOO_LARGE, None])
    out = _run([_row(1, "a"), _row(2, "a")], producer)
    assert out.breaches == {("case", "a")}
    assert "message timeout" not in caplog.text and "rejected the record batch" in caplog.text


def test_record_batch_size_of_one_record() -> None:
    # 61 header + varint(len) + attributes/timestampDelta/offsetDelta + key + value + headers
    body = 3 + (1 + 3) + (1 + 10) + 1 + (1 + 2 + 1 + 1)
    assert record_batch_size(b"agg", b"0123456789", [("id", b"1")]) == RECORD_BATCH_OVERHEAD + 1 + body
    assert record_batch_size(None, b"x" * 1000) > 1000 + RECORD_BATCH_OVERHEAD


@pytest.mark.parametrize("key, value, headers", [
    (None, None, []),
    (b"agg", b"0123456789", [("id", b"1")]),
    (b"k" * 200, b"v" * 70_000, [("id", b"x" * 36), ("type", None), ("\u00e9v\u00e9nement", b"y" * 20_000)]),
    (b"k", b"v" * 3_000_000, [(f"h{i}", b"z" * 127) for i in range(40)]),
])
def test_the_cheap_size_bound_is_never_below_the_exact_size(key: Any, value: Any, headers: Any) -> None:
    exact = record_batch_size(key, value, headers)
    assert exact <= record_batch_size_at_most(key, value, headers) <= exact + 64 + 14 * len(headers)


def test_a_row_exactly_at_the_topic_limit_is_sent_and_one_byte_over_is_refused() -> None:
    # The bound exceeds the limit in both cases, so the exact size decides.
    row = _row(1, "a", size=1000)
    size = record_batch_size(b"a", row.payload, [("id", row.id.encode()), ("type", b"CaseOpened"),
                                                  ("event_version", b"1"), ("traceparent", None),
                                                  ("correlation_id", None)])
    producer = ReportingProducer([None])
    assert _run([row], producer, limit=size).failed == [] and producer.sent == ["a"]
    out = _run([row], ReportingProducer([]), limit=size - 1)
    assert f"record of {size} bytes exceeds max.message.bytes={size - 1}" in out.failed[0][1]


def test_topic_limits_warm_starts_the_admin_client_without_waiting_for_a_broker() -> None:
    from casestream.kafka.topics import TopicLimits

    limits = TopicLimits({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 100})
    limits.warm()  # no broker listens there: neither raises nor blocks
    assert limits._admin is not None
    admin = limits._admin
    limits.warm()
    assert limits._admin is admin  # one client, reused by limits()
