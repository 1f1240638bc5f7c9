"""Dead-letter topic per consumer: headers, redaction, publishing, reading and re-drive.

A dead letter is the original message — key and value
bytes unchanged, original headers kept — published to ``<consumer>.dlq`` with these headers
added (values UTF-8):

==========================  =====================================================================
``dlq.original.topic``       topic the message was first consumed from
``dlq.original.partition``   its partition
``dlq.original.offset``      its offset
``dlq.original.timestamp``   its Kafka timestamp, ms since the epoch ("" if none)
``dlq.consumer``             consumer name (= group id), e.g. ``billing.invoices``
``dlq.error.class``          exception class, ``module.Qualname``
``dlq.error.reason``         machine-readable reason: ``bad_magic_byte``, ``unknown_schema_id``,
                             ``version_gap``, ``unknown_event_type``, ``retries_exhausted`` ...
``dlq.error.message``        exception text, personal data redacted (:func:`redact`), <= 1000 chars
``dlq.attempts``             attempts made before dead-lettering (1 for poison)
``dlq.first.failure``        first failure time, ISO-8601 UTC
``dlq.last.failure``         last failure time, ISO-8601 UTC
``dlq.redrive.count``        how many times the message has been re-driven before
``correlation_id``           correlation id (copied from the envelope if the header was missing)
``traceparent``              W3C trace context (likewise)
==========================  =====================================================================

Re-drive (``casestream dlq redrive``) copies selected dead letters, bytes and headers unchanged
plus ``dlq.redriven.at`` (and ``dlq.accept_gap=true`` on request), to ``<consumer>.redrive``.
The consumer runtime subscribes to that topic and runs those messages through the same decode,
upcasters, version guard and inbox as live ones, so re-driving twice has one effect. A message
that fails again is dead-lettered again with its *original* position headers kept.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from casestream.consumer.records import Headers, Record
from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, client_config

DLQ_PREFIX = "dlq."
H_TOPIC = "dlq.original.topic"
H_PARTITION = "dlq.original.partition"
H_OFFSET = "dlq.original.offset"
H_TIMESTAMP = "dlq.original.timestamp"
H_CONSUMER = "dlq.consumer"
H_CLASS = "dlq.error.class"
H_REASON = "dlq.error.reason"
H_MESSAGE = "dlq.error.message"
H_ATTEMPTS = "dlq.attempts"
H_FIRST = "dlq.first.failure"
H_LAST = "dlq.last.failure"
H_REDRIVE_COUNT = "dlq.redrive.count"
H_REDRIVEN_AT = "dlq.redriven.at"
H_ACCEPT_GAP = "dlq.accept_gap"
ORIGIN_HEADERS = (H_TOPIC, H_PARTITION, H_OFFSET, H_TIMESTAMP)

MAX_MESSAGE = 1000

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")
_PHONE = re.compile(r"(?<![\w-])\+?\d[\d ()\-]{7,}\d(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b")


class DeadLetterError(CasestreamError):
    """Publishing to or reading from a dead-letter topic failed."""


def redact(text: str) -> str:
    """``text`` with e-mail addresses, phone-like numbers and IBAN-like strings replaced, cut to 1000 chars.

    A dead letter's error message carries no personal data. Payload values reach
    error messages through exceptions (e.g. psycopg's ``DETAIL: Key (email)=(a@b.c)``).
    """
    text = _EMAIL.sub("<email>", text)
    text = _IBAN.sub("<iban>", text)
    text = _PHONE.sub("<number>", text)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def iso(ts: datetime) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2025-01-31T12:00:00.123Z``."""
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A message to dead-letter and why.

    ``correlation_id``/``traceparent`` are taken from the decoded envelope when the message
    could be decoded (None otherwise); the original headers are used first anyway.
    """

    record: Record
    error_class: str
    reason: str
    message: str
    attempts: int
    first_failure: datetime
    last_failure: datetime
    correlation_id: str | None = None
    traceparent: str | None = None
    event_id: str | None = None
    event_type: str | None = None


def dead_letter_headers(consumer: str, dl: DeadLetter) -> list[tuple[str, bytes]]:
    """The headers of the dead-letter message for ``dl`` (see module docstring), in order."""
    rec = dl.record
    kept = [(k, v) for k, v in rec.headers if not k.startswith(DLQ_PREFIX)]
    names = {k for k, _ in kept}
    prior = {k: v for k, v in rec.headers if k.startswith(DLQ_PREFIX)}
    if H_TOPIC in prior:  # a re-driven message failing again keeps its first position
        origin = [(h, prior.get(h, b"")) for h in ORIGIN_HEADERS]
    else:
        origin = [
            (H_TOPIC, rec.topic.encode()),
            (H_PARTITION, str(rec.partition).encode()),
            (H_OFFSET, str(rec.offset).encode()),
            (H_TIMESTAMP, str(rec.timestamp_ms if rec.timestamp_ms is not None else "").encode()),
        ]
    redrives = int(prior.get(H_REDRIVE_COUNT, b"0") or b"0")
    if H_REDRIVEN_AT in prior:
        redrives += 1
    extra = [
        (H_CONSUMER, consumer.encode()),
        (H_CLASS, dl.error_class.encode()),
        (H_REASON, dl.reason.encode()),
        (H_MESSAGE, redact(dl.message).encode()),
        (H_ATTEMPTS, str(dl.attempts).encode()),
        (H_FIRST, iso(dl.first_failure).encode()),
        (H_LAST, iso(dl.last_failure).encode()),
        (H_REDRIVE_COUNT, str(redrives).encode()),
    ]
    for name, value in (("correlation_id", dl.correlation_id), ("traceparent", dl.traceparent),
                        ("id", dl.event_id), ("type", dl.event_type)):
        if value and name not in names:
            kept.append((name, value.encode()))
    return kept + origin + extra


class DeadLetterSink(Protocol):
    """Port the batch processor dead-letters through."""

    def send(self, dl: DeadLetter) -> None: ...

    def flush(self) -> None: ...


class KafkaDeadLetters:
    """Publishes dead letters to ``topic`` with an idempotent producer (acks=all).

    ``send`` is asynchronous; ``flush`` waits for every delivery and raises
    :class:`DeadLetterError` if any failed, so the runtime commits offsets only past messages
    that really are on the dead-letter topic.
    """

    def __init__(self, producer_config: dict[str, Any], topic: str, consumer: str,
                 *, flush_timeout_s: float = 30.0) -> None:
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import Producer

        conf = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, **producer_config}
        self._producer = Producer(conf)
        self.topic = topic
        self.consumer = consumer
        self._flush_timeout_s = flush_timeout_s
        self._errors: list[str] = []
        self._lock = threading.Lock()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._errors.append(str(err))

    def send(self, dl: DeadLetter) -> None:
        """Queue ``dl`` for delivery (key/value unchanged, headers per module docstring)."""
        rec = dl.record
        self._producer.produce(
            self.topic, key=rec.key, value=rec.value,
            headers=dead_letter_headers(self.consumer, dl), on_delivery=self._on_delivery,
        )
        self._producer.poll(0)

    def flush(self) -> None:
        """Wait for all deliveries. Raises DeadLetterError on a failed or timed-out delivery."""
        remaining = self._producer.flush(self._flush_timeout_s)
        with self._lock:
            errors, self._errors = self._errors, []
        if remaining or errors:
            raise DeadLetterError(
                f"dead-letter delivery to {self.topic} failed: {remaining} undelivered, {errors[:3]}"
            )


class MemoryDeadLetters:
    """In-memory sink for unit tests and benchmarks: keeps every DeadLetter sent."""

    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    def send(self, dl: DeadLetter) -> None:
        self.sent.append(dl)

    def flush(self) -> None:
        return None


# ---------------------------------------------------------------- reading and re-drive (CLI)

def read_topic(bootstrap: KafkaTarget, topic: str, *, timeout_s: float = 10.0,
               extra_config: dict[str, Any] | None = None) -> list[Record]:
    """Every message currently in ``topic`` (low to high watermark, all partitions), in
    (partition, offset) order. Uses ``assign`` without a group commit, so it changes nothing.

    Raises:
        DeadLetterError: the topic does not exist or the broker did not answer within ``timeout_s``.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import Consumer, TopicPartition

    conf = {**client_config(bootstrap), "group.id": f"casestream-dlq-reader-{uuid.uuid4()}",
            "enable.auto.commit": False, "enable.partition.eof": False,
            **(extra_config or {})}
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            raise DeadLetterError(f"topic {topic} not found: {getattr(tmd, 'error', None)}")
        wanted: dict[int, int] = {}
        assign = []
        for p in sorted(tmd.partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if hi > lo:
                wanted[p] = hi
                assign.append(TopicPartition(topic, p, lo))
        out: list[Record] = []
        if not assign:
            return out
        consumer.assign(assign)
        import time

        deadline = time.monotonic() + timeout_s
        while wanted and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    continue
                p = msg.partition()
                if p in wanted:
                    out.append(record_from_message(msg))
                    if msg.offset() + 1 >= wanted[p]:
                        del wanted[p]
        if wanted:
            raise DeadLetterError(f"timed out reading {topic} (partitions left: {sorted(wanted)})")
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        consumer.close()


def record_from_message(msg: Any) -> Record:
    """Copy a ``confluent_kafka.Message`` into a :class:`Record`."""
    ts_type, ts = msg.timestamp()
    return Record(
        topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), key=msg.key(),
        value=msg.value(), headers=tuple(msg.headers() or ()),
        timestamp_ms=ts if ts_type != 0 else None,
    )


def select(records: Sequence[Record], *, event_ids: Iterable[str] = (),
           first: int | None = None) -> list[Record]:
    """Pick dead letters: by event id (header ``id``), or the first N, or all (no filter)."""
    wanted = set(event_ids)
    chosen = [r for r in records if not wanted or r.header("id") in wanted]
    return chosen[:first] if first is not None else chosen


def redrive(bootstrap: KafkaTarget, records: Sequence[Record], redrive_topic: str, *,
            accept_gap: bool = False, now: Callable[[], datetime] | None = None,
            producer_config: dict[str, Any] | None = None, timeout_s: float = 30.0) -> int:
    """Copy ``records`` (dead letters) to ``redrive_topic``; returns how many were delivered.

    Key, value and headers are kept; ``dlq.redriven.at`` is set (replacing an older one) and,
    with ``accept_gap``, ``dlq.accept_gap=true`` (the runtime then records the version before the
    event as seen, unparking an aggregate whose missing event is lost for good).

    Raises:
        DeadLetterError: a delivery failed.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import Producer

    stamp = iso((now or (lambda: datetime.now(timezone.utc)))())
    producer = Producer({**client_config(bootstrap), "acks": "all",
                         "enable.idempotence": True, **(producer_config or {})})
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for rec in records:
        headers: Headers = tuple(
            (k, v) for k, v in rec.headers if k not in (H_REDRIVEN_AT, H_ACCEPT_GAP)
        ) + ((H_REDRIVEN_AT, stamp.encode()),)
        if accept_gap:
            headers += ((H_ACCEPT_GAP, b"true"),)
        producer.produce(redrive_topic, key=rec.key, value=rec.value, headers=list(headers),
                         on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left or errors:
        raise DeadLetterError(f"re-drive to {redrive_topic}: {left} undelivered, errors {errors[:3]}")
    return len(records)
