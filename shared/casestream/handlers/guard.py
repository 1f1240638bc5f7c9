"""Aggregate-version guard: the pure decision rule (no I/O).

Per (consumer, aggregate type, aggregate id) the guard keeps
``last_version``, the highest aggregate version this consumer has *recorded*. Every decoded event
of the consumer's topics counts, whether or not the consumer has a handler for its type: a
per-topic consumer receives every event of the aggregate, so it can tell a real gap from an
event it merely does not care about.

For an event with version ``v``:

- ``v <= last``      → ``STALE``: already recorded (duplicate or out-of-date copy); counted no-op.
- ``v == last + 1``  → ``APPLY``: run the handlers, record ``last = v``.
- ``v >  last + 1``  → ``GAP``: an event in between has not been recorded. The aggregate is
  *held*: this event and every later one for the aggregate are stored in the held-event table
  (``casestream.consumer.inbox``) instead of being applied, while other aggregates keep flowing. When the
  missing version is applied (it arrives late, or is re-driven from the dead-letter topic), the
  held events are drained in version order in the same transaction. If nothing fills the gap
  within ``gap_hold_s`` the aggregate is *parked* and its first held event is dead-lettered with
  reason ``version_gap``; later events still wait behind it (see ``AggregateState``).

First-seen policy (no guard row yet, ``last`` is None), configurable per consumer:

- ``FirstSeenPolicy.STRICT`` (default): the first event must have version 1; anything else is a
  gap behind version 0. Right for a consumer that reads its topics from the beginning.
- ``FirstSeenPolicy.BASELINE``: the first event seen establishes the baseline and is applied
  whatever its version. Right for consumers that start at ``latest`` or after retention removed
  old events; later gaps are still detected.

How a parked aggregate gets unparked (one of):

1. the missing event is applied — it is re-driven from ``<consumer>.dlq`` (``casestream dlq
   redrive``) after its cause was fixed, or arrives late on the topic; the held events then drain;
2. the operator accepts the gap: ``casestream dlq redrive --accept-gap --event-id <gap event>``
   re-drives the parked event with header ``dlq.accept_gap=true``; the runtime then records
   ``last = v - 1`` (logged as an accepted gap) and applies it, and the rest drains.
"""

from __future__ import annotations

import enum


class Verdict(enum.Enum):
    """What to do with one event for its aggregate."""

    APPLY = "apply"
    STALE = "stale"
    GAP = "gap"


class FirstSeenPolicy(enum.Enum):
    """What the first event seen for an aggregate (no guard row yet) must look like."""

    STRICT = "strict"
    BASELINE = "baseline"


class AggregateState(enum.Enum):
    """Lifecycle of an aggregate in the guard table.

    FLOWING: no held events; events apply as they come.
    HOLDING: a gap was seen; held events wait; the hold deadline has not passed yet.
    PARKED: the deadline passed; the first held event was dead-lettered (``version_gap``);
        events keep waiting behind it until the gap is filled or accepted.
    """

    FLOWING = "flowing"
    HOLDING = "holding"
    PARKED = "parked"


def decide(last_version: int | None, version: int, policy: FirstSeenPolicy) -> Verdict:
    """The verdict for an event of aggregate version ``version`` given the recorded ``last_version``.

    Args:
        last_version: highest recorded version, ``None`` if the aggregate was never seen.
        version: the event's ``aggregate_version`` (>= 1).
        policy: how to treat the first event of an aggregate.

    Raises:
        ValueError: ``version`` < 1 (the envelope contract says aggregate_version >= 1).
    """
    if version < 1:
        raise ValueError(f"aggregate_version must be >= 1, got {version}")
    if last_version is None:
        if policy is FirstSeenPolicy.BASELINE or version == 1:
            return Verdict.APPLY
        return Verdict.GAP
    if version <= last_version:
        return Verdict.STALE
    if version == last_version + 1:
        return Verdict.APPLY
    return Verdict.GAP
