"""Classify a Kafka delivery error as retryable (back off, try again) or not (mark failed).

The relay decides by error code, not by ``KafkaError.retriable()``: a per-message
delivery report carries a bare ``rd_kafka_resp_err_t`` code, and a ``KafkaError`` built
from a code alone reports ``retriable() == False`` even for a timeout. Non-retryable: the record itself can never be accepted as it is (too large,
invalid, refused by policy or ACL, bad topic name) — retrying would hold the aggregate
back for nothing, so the row is marked ``failed`` with the reason and re-driven by an
operator (``casestream outbox redrive``). Everything else — timeouts, broker or leader
unavailable, unknown topic (may be created), purges, fatal producer errors (the relay
recreates the producer) — is retryable with backoff.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

__all__ = ["Classified", "classify", "NON_RETRYABLE_CODES"]

NON_RETRYABLE_CODES: frozenset[int] = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,             # broker MESSAGE_TOO_LARGE / local message.max.bytes
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_TIMESTAMP,
    KafkaError.POLICY_VIOLATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_EXCEPTION,                # invalid topic name
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError._INVALID_ARG,
    KafkaError._BAD_MSG,
    KafkaError._INVALID_TYPE,
})


@dataclass(frozen=True, slots=True)
class Classified:
    """A delivery error, classified.

    Attributes:
        retryable: True → reschedule with backoff; False → mark the row failed.
        code: librdkafka error code (``KafkaError.code()``).
        reason: ``"<NAME>: <message>"`` stored in ``outbox.last_error``.
    """

    retryable: bool
    code: int
    reason: str


def classify(err: KafkaError) -> Classified:
    """Classify ``err`` (from a delivery report or a synchronous ``produce`` failure)."""
    code = err.code()
    reason = f"{err.name()}: {err.str()}"
    return Classified(retryable=code not in NON_RETRYABLE_CODES, code=code, reason=reason[:1000])
