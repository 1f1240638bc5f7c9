"""Plain values the consumer runtime passes around: raw records, outcomes, counters; the decoder port.

Pure module (stdlib only). A :class:`Record` is a Kafka message copied out of the client
(``confluent_kafka.Message``) so the batch processor and tests do not depend on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from casestream.events.envelope import Envelope

Headers = tuple[tuple[str, bytes], ...]


class EnvelopeDecoder(Protocol):
    """Port satisfied by ``casestream.events.codec.EnvelopeCodec``.

    ``decode`` turns a message value (Confluent wire format) into an upcast Envelope whose
    ``published_at`` is the given time; it raises ``PoisonMessageError`` for bytes that can never
    decode (bad magic byte, unknown schema id, resolution or validation failure) and
    ``RegistryUnavailable`` when the registry cannot be reached (retried). A decoder that also
    has ``decode_message(value, *, published_at=None) -> DecodedMessage`` (the codec does) is read
    through it, so a message an event upcaster makes zero or several events of is applied as one
    aggregate step with every event handled in order (``casestream.events.upcasting``).
    """

    def decode(self, value: bytes, *, published_at: datetime | None = None) -> Envelope: ...


class Record(NamedTuple):
    """One consumed message (a NamedTuple: immutable and cheap to build on the hot path).

    Attributes:
        topic, partition, offset: position in Kafka.
        key, value: raw bytes (``None`` if absent).
        headers: header name/value pairs in order (values as bytes).
        timestamp_ms: Kafka message timestamp in ms since the epoch (= published_at), or None.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None

    @property
    def tp(self) -> tuple[str, int]:
        """(topic, partition)."""
        return (self.topic, self.partition)

    def header(self, name: str) -> str | None:
        """Last value of header ``name`` decoded as UTF-8, or None."""
        found = None
        for k, v in self.headers:
            if k == name and v is not None:
                found = v
        return found.decode("utf-8", "replace") if found is not None else None

    @property
    def published_at(self) -> datetime | None:
        """The Kafka timestamp as an aware UTC datetime."""
        if self.timestamp_ms is None or self.timestamp_ms < 0:
            return None
        return datetime.fromtimestamp(self.timestamp_ms / 1000.0, tz=timezone.utc)


@dataclass(slots=True)
class ConsumerStats:
    """Counters of one runtime (monotonic since start); read by tests, logs and metrics.

    applied: events recorded by the guard and whose handlers ran (or had none).
    duplicates: event id already in the inbox.   stale: version <= last recorded.
    reused_ids: a recorded event id arriving with other content (tenant, type, aggregate,
        version or payload): dead-lettered, reason ``reused_event_id``.
    unknown_type: events with no handler (skipped, still recorded by the guard).
    held: events stored behind a version gap.    drained: held events applied later.
    parked: aggregates parked after the hold bound.
    dead_lettered: messages written to the DLQ.   retries: retryable failures (per attempt).
    infra_failures: batch-level failures (connection lost, commit failed).
    batches / fast_batches: poll batches applied (with records) / of which on the fast path.
    offset_commits / offset_commit_failures: offset commits that succeeded / failed.
    accepted_gaps: version gaps accepted on a re-drive with ``dlq.accept_gap``.
    assignments / revocations: rebalance callbacks seen (incremental: some partitions each time).
    stalls: times the loop was seen stuck in one step longer than ``stall_after_s``.
    consumer_restarts: times the Kafka consumer was closed and made again because no
        assignment came within ``ConsumerSettings.rejoin_timeout_s``.
    flow_pauses: times a key-parallel loop paused its partitions for a key queue at its hard
        bound (``casestream.consumer.keyparallel.key_queue_flow``).
    partitions_assigned: partitions assigned to this runtime now (a gauge, not monotonic):
        how the group's partitions are spread over the instances of a service.
    """

    applied: int = 0
    duplicates: int = 0
    reused_ids: int = 0
    stale: int = 0
    unknown_type: int = 0
    held: int = 0
    drained: int = 0
    parked: int = 0
    dead_lettered: int = 0
    retries: int = 0
    infra_failures: int = 0
    batches: int = 0
    fast_batches: int = 0
    offset_commits: int = 0
    offset_commit_failures: int = 0
    accepted_gaps: int = 0
    stalls: int = 0
    consumer_restarts: int = 0
    flow_pauses: int = 0
    assignments: int = 0
    revocations: int = 0
    partitions_assigned: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def count_reason(self, reason: str) -> None:
        """Count one dead letter under ``reason``."""
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
