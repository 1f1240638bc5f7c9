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

A dead letter can always be written. The producer's ``message.max.bytes`` is the
dead-letter topic's ``max.message.bytes`` (read from the broker when first needed, or
given), not librdkafka's default 1,000,000 bytes; a message that does not fit even so (the
source topic allows larger ones) is dead-lettered as a **reference**: no value, the
original headers reduced to ``id``/``type``/``correlation_id``/``traceparent``, and

==========================  =====================================================================
``dlq.reference``            ``true``: the value is not here; read it at the original position
``dlq.original.size``        bytes of the original value
``dlq.original.sha256``      SHA-256 of the original value, hex
``dlq.reference.reason``     ``too_large`` (the message exceeds the dead-letter topic's limit)
==========================  =====================================================================

so a partition is never wedged behind a message that cannot be dead-lettered. A reference
is not re-driven (:func:`redrive` refuses it, naming the original position to re-consume).

Re-drive (``casestream dlq redrive``) copies selected dead letters, bytes and headers unchanged
plus ``dlq.redriven.at`` (and ``dlq.accept_gap=true`` on request), to ``<consumer>.redrive``.
The consumer runtime subscribes to that topic and runs those messages through the same decode,
upcasters, version guard and inbox as live ones, so re-driving twice has one effect. A message
that fails again is dead-lettered again with its *original* position headers kept.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from casestream.consumer.records import Headers, Record
from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, client_config

log = logging.getLogger(__name__)

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
H_REFERENCE = "dlq.reference"
H_SIZE = "dlq.original.size"
H_SHA256 = "dlq.original.sha256"
H_REFERENCE_REASON = "dlq.reference.reason"
REFERENCE_KEPT = ("id", "type", "correlation_id", "traceparent")
"""Original headers a reference keeps (each cut to :data:`REFERENCE_HEADER_MAX` bytes)."""
REFERENCE_HEADER_MAX = 256

LIBRDKAFKA_MESSAGE_MAX = 1_000_000
"""librdkafka's default ``message.max.bytes``: the limit used when the topic's is unknown."""
RECORD_OVERHEAD = 1024
"""Bytes reserved for the record batch and record framing around key, value and headers
(Kafka protocol ``RecordBatch`` v2: 61-byte batch header, varint-framed records)."""
ORIGIN_HEADERS = (H_TOPIC, H_PARTITION, H_OFFSET, H_TIMESTAMP)

MAX_MESSAGE = 1000

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")
# a schema id or an offset the error names is an identifier, not a phone number
_PHONE = re.compile(r"(?<![\w-])(?<!schema id )(?<!offset )\+?\d[\d ()\-]{7,}\d(?![\w-])")
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


def record_size(key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes]]) -> int:
    """Bytes a record takes on the wire, an upper bound: key, value, headers, framing."""
    return (len(key or b"") + len(value or b"") + RECORD_OVERHEAD
            + sum(len(k) + len(v or b"") + 10 for k, v in headers))


def reference_headers(consumer: str, dl: DeadLetter) -> list[tuple[str, bytes]]:
    """The headers of a reference dead letter for ``dl`` (module docstring)."""
    value = dl.record.value or b""
    full = dead_letter_headers(consumer, dl)
    kept = [(k, v[:REFERENCE_HEADER_MAX]) for k, v in full
            if k.startswith(DLQ_PREFIX) or k in REFERENCE_KEPT]
    return kept + [(H_REFERENCE, b"true"), (H_SIZE, str(len(value)).encode()),
                   (H_SHA256, hashlib.sha256(value).hexdigest().encode()),
                   (H_REFERENCE_REASON, b"too_large")]


def topic_message_max(admin_config: dict[str, Any], topic: str, *,
                      timeout_s: float = 10.0) -> int | None:
    """The topic's ``max.message.bytes`` as the broker reports it (None if it cannot be read:
    no such topic yet, no permission, broker down)."""
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka.admin import AdminClient, ConfigResource

    try:
        admin = AdminClient(admin_config)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
        entry = configs.result(timeout_s).get("max.message.bytes")
        return int(entry.value) if entry is not None and entry.value else None
    except Exception as e:  # noqa: BLE001 - any failure: fall back to the safe default
        log.warning("dead-letter topic %s: max.message.bytes not readable (%s)", topic, e)
        return None


class KafkaDeadLetters:
    """Publishes dead letters to ``topic`` with an idempotent producer (acks=all).

    ``send`` is asynchronous; ``flush`` waits for every delivery and raises
    :class:`DeadLetterError` if any failed, so the runtime commits offsets only past messages
    that really are on the dead-letter topic. A dead letter too large for the topic is sent
    as a reference (module docstring), also when the broker refuses it
    (``MSG_SIZE_TOO_LARGE`` in the delivery report).

    Args:
        producer_config: client settings (``bootstrap.servers``, security); a
            ``message.max.bytes`` here wins over the topic's.
        max_message_bytes: the topic's ``max.message.bytes``; default: read from the broker
            at the first send (then :data:`LIBRDKAFKA_MESSAGE_MAX` if it cannot be read).
    """

    def __init__(self, producer_config: dict[str, Any], topic: str, consumer: str,
                 *, flush_timeout_s: float = 30.0, max_message_bytes: int | None = None) -> None:
        self._config = dict(producer_config)
        if "message.max.bytes" in self._config:
            max_message_bytes = int(self._config["message.max.bytes"])
        self._max_bytes = max_message_bytes
        self._producer: Any = None
        self.topic = topic
        self.consumer = consumer
        self._flush_timeout_s = flush_timeout_s
        self._errors: list[str] = []
        self._too_large: list[DeadLetter] = []
        self._lock = threading.Lock()
        self.references = 0

    @property
    def max_message_bytes(self) -> int:
        """The limit dead letters are sized against, bytes (read from the broker once)."""
        if self._max_bytes is None:
            found = topic_message_max(self._config, self.topic)
            self._max_bytes = found if found is not None else LIBRDKAFKA_MESSAGE_MAX
        return self._max_bytes

    def _client(self) -> Any:
        if self._producer is None:
            # lazy (start-up cost): confluent_kafka loads when a client is built
            from confluent_kafka import Producer

            self._producer = Producer({"acks": "all", "enable.idempotence": True,
                                       "linger.ms": 5, **self._config,
                                       "message.max.bytes": max(1000, self.max_message_bytes)})
        return self._producer

    def _on_delivery(self, dl: DeadLetter, reference: bool) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                return
            with self._lock:
                if not reference and _is_too_large(err):
                    self._too_large.append(dl)
                else:
                    self._errors.append(str(err))
        return done

    def send(self, dl: DeadLetter) -> None:
        """Queue ``dl`` for delivery (key/value unchanged, headers per module docstring),
        or its reference when it does not fit the topic."""
        rec = dl.record
        headers = dead_letter_headers(self.consumer, dl)
        if record_size(rec.key, rec.value, headers) > self.max_message_bytes:
            self._send_reference(dl)
            return
        producer = self._client()
        try:
            producer.produce(self.topic, key=rec.key, value=rec.value, headers=headers,
                             on_delivery=self._on_delivery(dl, False))
        except Exception as e:
            if not _is_too_large(e):
                raise
            self._send_reference(dl)
            return
        producer.poll(0)

    def _send_reference(self, dl: DeadLetter) -> None:
        rec = dl.record
        log.warning("%s: message %s[%d]@%d (%d bytes) exceeds dead-letter topic %s's limit "
                    "of %d bytes: dead-lettered as a reference", self.consumer, rec.topic,
                    rec.partition, rec.offset, len(rec.value or b""), self.topic,
                    self.max_message_bytes)
        self.references += 1
        producer = self._client()
        producer.produce(self.topic, key=(rec.key or b"")[:REFERENCE_HEADER_MAX] or None,
                         value=None, headers=reference_headers(self.consumer, dl),
                         on_delivery=self._on_delivery(dl, True))
        producer.poll(0)

    def flush(self) -> None:
        """Wait for all deliveries (a dead letter the broker refused as too large is sent
        again as its reference). Raises DeadLetterError on a failed or timed-out delivery."""
        if self._producer is None:
            return
        remaining = self._producer.flush(self._flush_timeout_s)
        with self._lock:
            refused, self._too_large = self._too_large, []
        if refused:
            for dl in refused:
                self._send_reference(dl)
            remaining = self._producer.flush(self._flush_timeout_s)
        with self._lock:
            errors, self._errors = self._errors, []
        if remaining or errors:
            raise DeadLetterError(
                f"dead-letter delivery to {self.topic} failed: {remaining} undelivered, {errors[:3]}"
            )


def _is_too_large(error: Any) -> bool:
    """True for librdkafka's ``MSG_SIZE_TOO_LARGE`` (local or from the broker)."""
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(error, KafkaException):
        error = error.args[0] if error.args else None
    code = error.code() if isinstance(error, KafkaError) else None
    return code == KafkaError.MSG_SIZE_TOO_LARGE


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
    from confluent_kafka import KafkaException

    from casestream.kafka.topics import read_messages

    try:
        messages = read_messages(bootstrap, [topic], timeout_s=timeout_s, extra_config=extra_config)
    except KafkaException as e:
        raise DeadLetterError(f"topic {topic} not found: {e}") from None
    except TimeoutError as e:
        raise DeadLetterError(f"timed out reading {topic}: {e}") from None
    return [record_from_message(m) for m in messages]


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

    references = [r for r in records if r.header(H_REFERENCE) == "true"]
    if references:
        where = ", ".join(f"{r.header(H_TOPIC)}[{r.header(H_PARTITION)}]@{r.header(H_OFFSET)}"
                          for r in references[:5])
        raise DeadLetterError(f"{len(references)} dead letter(s) are references to messages too "
                              f"large for the dead-letter topic ({where}): re-consume them from "
                              "their original position instead")
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
