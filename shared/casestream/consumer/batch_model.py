"""Values of a batch: decoded batch, per-record item, action, result, attempt counts.

Plain data shared by :class:`casestream.consumer.batch.BatchProcessor` and its collaborators;
no database access. Re-exported by ``casestream.consumer.batch``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from casestream.consumer.records import Record
from casestream.errors import CasestreamError
from casestream.consumer.inbox import HeldEvent, InboxEntry, payload_hash
from casestream.events.envelope import DecodedMessage

TP = tuple[str, int]


class Action(enum.Enum):
    """What the processor does with one decoded record."""

    APPLY = "apply"
    ACCEPT_GAP = "accept_gap"
    HOLD = "hold"
    DUPLICATE = "duplicate"
    STALE = "stale"
    UNKNOWN_STRICT = "unknown_strict"


class _Ineligible(CasestreamError):
    """The batch needs per-message handling (gap, held aggregate, side effect, strict type...)."""


@dataclass(slots=True)
class Item:
    """One record to apply (the value the consumer's batch modules pass each other; internal): ``env`` identifies it (event id for the inbox, aggregate and version
    for the guard); ``events`` are what handlers see when an event upcaster made other than the
    one event ``env`` of it (None: just ``env``; ``()``: nothing, the guard still advances)."""

    rec: Record
    env: Any
    events: tuple[Any, ...] | None = None
    #: ``(aggregate_type, aggregate_id)`` of ``env``: the guard row's key (made once; a batch
    #: looks it up several times per record)
    key: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.env.aggregate_type, self.env.aggregate_id)

    @property
    def handled(self) -> tuple[Any, ...]:
        """The events the handlers of this record run for, in order."""
        return (self.env,) if self.events is None else self.events

    def entry(self) -> InboxEntry:
        e = self.env
        return InboxEntry(event_id=e.event_id, event_type=e.event_type,
                          aggregate_type=e.aggregate_type, aggregate_id=e.aggregate_id,
                          aggregate_version=e.aggregate_version, payload_hash=payload_hash(e))


@dataclass(frozen=True, slots=True)
class Decoded:
    """A batch after decoding: (record, envelope or None, decode error or None) in order."""

    entries: list[tuple[Record, Any, BaseException | None]]

    @property
    def records(self) -> list[Record]:
        return [e[0] for e in self.entries]

    def without(self, drop: Any) -> Decoded:
        """The entries whose record does not satisfy ``drop(record)``."""
        return Decoded([e for e in self.entries if not drop(e[0])])

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(slots=True)
class BatchResult:
    """What the runtime must do with offsets after the transaction committed.

    commits: next offset to commit per (topic, partition) = last processed + 1, or the offset of
        the first message not processed (cut).
    rewinds: (topic, partition) -> (offset to seek to, seconds to keep the partition paused).
    fast: the batch went through the fast path.
    """

    commits: dict[TP, int] = field(default_factory=dict)
    rewinds: dict[TP, tuple[int, float]] = field(default_factory=dict)
    fast: bool = False

    def cut(self, tp: TP, offset: int, delay_s: float) -> None:
        """Stop processing ``tp`` at ``offset``: commit up to it, rewind there after ``delay_s``."""
        self.commits[tp] = offset
        self.rewinds[tp] = (offset, delay_s)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def item_of(rec: Record, decoded: Any) -> Item:
    """The :class:`Item` of ``rec`` from what :func:`decode_record` returned for it."""
    if isinstance(decoded, DecodedMessage):
        source, events = decoded
        return Item(rec, events[0] if events else source, events)
    return Item(rec, decoded)


def decode_record(decoder: Any, value: bytes, published_at: datetime | None) -> Any:
    """Decode one message value: the Envelope, or a ``DecodedMessage`` when event upcasters
    made other than that one event of it (``decode_message`` of the decoder, where it has one)."""
    decode_message = getattr(decoder, "decode_message", None)
    if decode_message is None:
        return decoder.decode(value, published_at=published_at)
    m = decode_message(value, published_at=published_at)
    events = m.events
    return events[0] if len(events) == 1 and events[0] is m.source else m


def held_record(h: HeldEvent) -> Record:
    """The :class:`Record` a held event was stored from."""
    return Record(topic=h.topic, partition=h.partition, offset=h.offset, key=h.key,
                  value=h.value, headers=h.headers, timestamp_ms=h.timestamp_ms)


__all__ = ["TP", "Action", "BatchResult", "Decoded", "Item", "decode_record", "held_record", "item_of"]
