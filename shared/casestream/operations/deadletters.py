"""Dead letters as state: which entries of ``<consumer>.dlq`` are still open.

The dead-letter topic is append-only (``casestream.consumer.deadletters``): the original
dead letter and every later one of the same message stay on it. This module derives, from
the topics alone (so it survives restarts), which entries still need an operator:

- The entries of one message share their *origin* (headers ``dlq.original.topic``,
  ``dlq.original.partition``, ``dlq.original.offset``, kept when a re-driven copy fails
  again). Only the newest entry of an origin can be open; the older ones are *superseded*.
- The newest entry is *resolved* when a re-driven copy of it (same origin, same
  ``dlq.redrive.count``) on ``<consumer>.redrive`` lies below the consumer group's committed
  offset there: the consumer processed it without dead-lettering it again. The consumer
  flushes a new dead letter before it commits past the copy, and the committed offsets are
  read first, then the re-drive topic, then the dead-letter topic — so a copy that failed
  again is always seen with its new entry.
- It is *discarded* when a successful ``dlq.discard`` operator action names it
  (:mod:`casestream.operations.actions`).
- A copy not yet consumed leaves the entry open, with state ``redriving``.

Entry labels are ``PARTITION:OFFSET`` on the dead-letter topic, as ``casestream dlq list`` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from casestream.consumer.deadletters import (
    H_ATTEMPTS,
    H_CLASS,
    H_FIRST,
    H_LAST,
    H_MESSAGE,
    H_OFFSET,
    H_PARTITION,
    H_REASON,
    H_REDRIVE_COUNT,
    H_REDRIVEN_AT,
    H_REFERENCE,
    H_TOPIC,
    DeadLetterError,
    read_topic,
)
from casestream.consumer.records import Record
from casestream.kafka.config import KafkaTarget
from casestream.operations.actions import ActionLogError, OperatorAction, discarded, read_actions

__all__ = ["DeadLetterEntry", "DeadLetterState", "dead_letter_state", "load_dead_letter_state",
           "dead_letter_counts", "read_if_exists",
           "STATE_OPEN", "STATE_REDRIVING", "STATE_RESOLVED", "STATE_DISCARDED", "STATE_SUPERSEDED"]

STATE_OPEN = "open"
STATE_REDRIVING = "redriving"
STATE_RESOLVED = "resolved"
STATE_DISCARDED = "discarded"
STATE_SUPERSEDED = "superseded"
OPEN_STATES = (STATE_OPEN, STATE_REDRIVING)


def _origin(r: Record) -> tuple[str, str, str]:
    return (r.header(H_TOPIC) or "", r.header(H_PARTITION) or "", r.header(H_OFFSET) or "")


def _count(r: Record) -> int:
    try:
        return int(r.header(H_REDRIVE_COUNT) or 0)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterEntry:
    """One message on ``<consumer>.dlq`` with its state (module docstring).

    ``attempts`` as the header says; ``first_failure``/``last_failure`` ISO-8601 UTC
    strings; ``origin`` ``topic[partition]@offset``; ``record`` the raw message.
    """

    consumer: str
    label: str
    state: str
    event_id: str | None
    event_type: str | None
    key: str | None
    reason: str | None
    error_class: str | None
    message: str | None
    attempts: str | None
    first_failure: str | None
    last_failure: str | None
    redrive_count: int
    origin: str
    reference: bool
    record: Record = field(repr=False)

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def summary(self) -> dict[str, Any]:
        """JSON-ready fields (no bytes)."""
        return {"consumer": self.consumer, "label": self.label, "state": self.state,
                "event_id": self.event_id, "type": self.event_type, "key": self.key,
                "reason": self.reason, "error_class": self.error_class, "message": self.message,
                "attempts": self.attempts, "first_failure": self.first_failure,
                "last_failure": self.last_failure, "redrive_count": self.redrive_count,
                "origin": self.origin, "reference": self.reference}


@dataclass(frozen=True, slots=True)
class DeadLetterState:
    """Every entry of one consumer's dead-letter topic, in topic order, with its state."""

    consumer: str
    entries: tuple[DeadLetterEntry, ...]

    @property
    def open(self) -> list[DeadLetterEntry]:
        return [e for e in self.entries if e.open]

    @property
    def depth(self) -> int:
        """Open entries (``open`` + ``redriving``): the dead-letter depth."""
        return len(self.open)


def dead_letter_state(consumer: str, dlq: Sequence[Record], redrive: Sequence[Record],
                      committed: Mapping[int, int | None], discards: Iterable[str] = ()) -> DeadLetterState:
    """The state of each entry of ``dlq`` (pure; the module docstring has the rule).

    Args:
        dlq: the messages of ``<consumer>.dlq``; redrive: those of ``<consumer>.redrive``.
        committed: the group's committed offset per partition of the re-drive topic (None: none).
        discards: labels named by successful discard actions.
    """
    gone = set(discards)
    newest: dict[tuple[str, str, str], Record] = {}
    for r in sorted(dlq, key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset)):
        newest[_origin(r)] = r
    copies: dict[tuple[tuple[str, str, str], int], list[Record]] = {}
    for c in redrive:
        if c.header(H_REDRIVEN_AT) is not None:
            copies.setdefault((_origin(c), _count(c)), []).append(c)
    entries = []
    for r in dlq:
        label = f"{r.partition}:{r.offset}"
        origin = _origin(r)
        if newest.get(origin) is not r:
            state = STATE_SUPERSEDED
        elif label in gone:
            state = STATE_DISCARDED
        else:
            mine = copies.get((origin, _count(r)), [])
            done = any((committed.get(c.partition) or 0) > c.offset for c in mine)
            state = STATE_RESOLVED if done else STATE_REDRIVING if mine else STATE_OPEN
        entries.append(DeadLetterEntry(
            consumer=consumer, label=label, state=state, event_id=r.header("id"),
            event_type=r.header("type"), key=r.key.decode("utf-8", "replace") if r.key else None,
            reason=r.header(H_REASON), error_class=r.header(H_CLASS), message=r.header(H_MESSAGE),
            attempts=r.header(H_ATTEMPTS), first_failure=r.header(H_FIRST),
            last_failure=r.header(H_LAST), redrive_count=_count(r),
            origin=f"{origin[0]}[{origin[1]}]@{origin[2]}",
            reference=r.header(H_REFERENCE) == "true", record=r))
    return DeadLetterState(consumer, tuple(entries))


def read_if_exists(bootstrap: KafkaTarget, topic: str, timeout_s: float = 10.0) -> list[Record]:
    """Every message of ``topic`` ([] when it does not exist: asked with an admin metadata
    request, which never creates a topic, unlike a consumer's).

    Raises:
        DeadLetterError: Kafka did not answer within ``timeout_s``.
    """
    from casestream.kafka.topics import topic_partitions

    try:
        if not topic_partitions(bootstrap, topic, timeout_s):
            return []
        return read_topic(bootstrap, topic, timeout_s=timeout_s)
    except DeadLetterError:
        raise
    except Exception as e:  # noqa: BLE001 - librdkafka errors: one kind for the caller
        raise DeadLetterError(f"reading {topic}: {e}") from None


def dead_letter_counts(bootstrap: KafkaTarget, *, timeout_s: float = 5.0) -> dict[str, int]:
    """Consumer name -> messages on its ``<consumer>.dlq`` topic (high - low watermark, summed
    over partitions), for every such topic of the cluster. 0 means nothing can be open.

    Raises:
        DeadLetterError: Kafka did not answer within ``timeout_s``.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from casestream.kafka.topics import watermark_totals

    try:
        return {t[: -len(".dlq")]: n for t, n in watermark_totals(
            bootstrap, lambda t: t.endswith(".dlq"), timeout_s).items()}
    except Exception as e:  # noqa: BLE001 - librdkafka errors: one kind for the caller
        raise DeadLetterError(f"dead-letter topics not listed: {e}") from None


def load_dead_letter_state(bootstrap: KafkaTarget, consumer: str, *,
                           actions_topic: str | None = None, timeout_s: float = 10.0,
                           dlq_topic: str | None = None, redrive_topic: str | None = None,
                           actions: Sequence[OperatorAction] | None = None) -> DeadLetterState:
    """Read the topics of ``consumer`` (group id = consumer name) and derive the state.

    Reads, in this order: the group's committed offsets on the re-drive topic, the re-drive
    topic, the dead-letter topic, the operator actions (module docstring: why the order).
    Topic names default to ``<consumer>.dlq`` / ``<consumer>.redrive``; a topic that does
    not exist yet reads as empty. ``actions``: the operator actions already read (several
    consumers at once), else they are read here.

    Raises:
        DeadLetterError: Kafka did not answer within ``timeout_s``.
    """
    dlq_topic = dlq_topic or f"{consumer}.dlq"
    redrive_topic = redrive_topic or f"{consumer}.redrive"
    from casestream.kafka.topics import committed_offsets, topic_partitions

    try:
        partitions = topic_partitions(bootstrap, redrive_topic, timeout_s)
        committed = {p: o for (_, p), o in committed_offsets(
            bootstrap, consumer, [(redrive_topic, p) for p in partitions], timeout_s).items()}
    except Exception as e:  # noqa: BLE001 - librdkafka errors: one kind for the caller
        raise DeadLetterError(f"committed offsets of {consumer} on {redrive_topic}: {e}") from None
    redrive = read_if_exists(bootstrap, redrive_topic, timeout_s)
    dlq = read_if_exists(bootstrap, dlq_topic, timeout_s)
    try:
        if actions is None:
            actions = read_actions(bootstrap, topic=actions_topic, timeout_s=timeout_s)
    except ActionLogError as e:
        raise DeadLetterError(str(e)) from None
    discards = discarded(actions, consumer)
    return dead_letter_state(consumer, dlq, redrive, committed, discards)
