"""The event envelope: metadata every casestream event carries around its typed payload.

Pure (stdlib only). The Avro form of the envelope is defined in ``schemas/envelope.avsc``
and encoded by :mod:`casestream.events.codec`; this module is the in-process shape. Field meanings
follow the event-driven patterns the suite is built on:

- ``occurred_at`` is when the fact happened (set by the producer, UTC); ``published_at``
  is when the relay put it on Kafka (the Kafka message timestamp, filled on decode).
- ``correlation_id`` ties one business flow (a case journey); ``causation_id`` names the
  event that directly caused this one.
- ``aggregate_version`` is the aggregate's version after this event (1 for the first);
  consumers use it to refuse stale and out-of-order events.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, NamedTuple

from casestream.errors import CasestreamError


class EnvelopeError(CasestreamError, ValueError):
    """An envelope field is invalid; the message names the field and the rule."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One integration event: envelope metadata plus its typed ``payload``.

    ``event_version`` None means "the newest version in the schema catalog", resolved by the
    codec when encoding; decoded envelopes always carry the (upcast) version.
    """

    event_id: str
    event_type: str
    event_version: int | None
    source: str
    tenant_id: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    occurred_at: datetime
    correlation_id: str
    actor_id: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    causation_id: str | None = None
    traceparent: str | None = None
    published_at: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("event_id", "event_type", "source", "tenant_id", "aggregate_type",
                     "aggregate_id", "correlation_id", "actor_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise EnvelopeError(f"{name}: must be a non-empty string, got {value!r}")
        if self.event_version is not None and (
            not isinstance(self.event_version, int) or self.event_version < 1
        ):
            raise EnvelopeError(f"event_version: must be an integer >= 1, got {self.event_version!r}")
        if not isinstance(self.aggregate_version, int) or self.aggregate_version < 1:
            raise EnvelopeError(
                f"aggregate_version: must be an integer >= 1, got {self.aggregate_version!r}")
        if self.occurred_at.tzinfo is None:
            raise EnvelopeError("occurred_at: must be timezone-aware (UTC)")


class DecodedMessage(NamedTuple):
    """One message value decoded: the event as stored and the events it stands for today.

    ``source``: the stored event (its event id and aggregate fields identify the message for the
    inbox and the aggregate-version guard; without event upcasters it is the upcast event itself).
    ``events``: what handlers see, in order — zero, one or several envelopes at their newest
    versions (``(source,)`` for a message no event upcaster touches).
    """

    source: Envelope
    events: tuple[Envelope, ...]


def _compile_trusted() -> Any:
    """Build :func:`envelope_from_trusted_record` (one slot store per field, unrolled)."""
    names = [f.name for f in fields(Envelope)]
    src = "def envelope_from_trusted_record(rec):\n    e = _new(Envelope)\n"
    src += "".join(f"    _set_{n}(e, rec[{n!r}])\n" for n in names) + "    return e\n"
    ns: dict[str, Any] = {"_new": object.__new__, "Envelope": Envelope}
    ns.update({f"_set_{n}": Envelope.__dict__[n].__set__ for n in names})
    exec(compile(src, "<casestream.events.envelope trusted>", "exec"), ns)
    return ns["envelope_from_trusted_record"]


#: ``envelope_from_trusted_record(rec) -> Envelope`` — the decoder's constructor.
#:
#: ``rec`` is a mapping with exactly one key per :class:`Envelope` field (a record read with a
#: catalog schema: every envelope field present and of its Avro type). Unlike ``Envelope(**rec)``
#: it does *not* run ``__post_init__``: the caller must already have checked what that checks
#: (non-empty ids, versions >= 1, aware ``occurred_at``); ``casestream.events.codec`` does, and uses
#: ``Envelope(**rec)`` whenever a check fails so that the error names the field. ~2.5x cheaper
#: (no keyword parsing, no validation pass). Raises KeyError if a field is missing.
envelope_from_trusted_record = _compile_trusted()


def new_event(
    *,
    event_type: str,
    aggregate_type: str,
    aggregate_id: str,
    aggregate_version: int,
    payload: Mapping[str, Any],
    tenant_id: str,
    source: str,
    actor_id: str,
    correlation_id: str,
    causation_id: str | None = None,
    traceparent: str | None = None,
    event_version: int | None = None,
    occurred_at: datetime | None = None,
    event_id: str | None = None,
) -> Envelope:
    """Build a new event with a fresh UUID ``event_id`` and ``occurred_at`` = now (UTC).

    Raises:
        EnvelopeError: a field is empty or a version is < 1 (the message names the field).
    """
    return Envelope(
        event_id=event_id or str(uuid.uuid4()),
        event_type=event_type,
        event_version=event_version,
        source=source,
        tenant_id=tenant_id,
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        aggregate_version=aggregate_version,
        occurred_at=occurred_at or datetime.now(UTC),
        correlation_id=correlation_id,
        actor_id=actor_id,
        payload=payload,
        causation_id=causation_id,
        traceparent=traceparent,
    )
