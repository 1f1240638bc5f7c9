"""An in-memory consumer for unit tests: a service's handlers run without Kafka or PostgreSQL.

:class:`MemoryBus` is to the consumer runtime what FastStream's ``TestKafkaBroker`` is to its
``KafkaBroker``: ``publish`` an event and it goes through the rules the real engines apply, in
the same order, with their own code for each rule —

1. **upcasting**: ``upcasters`` (:meth:`casestream.events.UpcasterChain.upcast_event`) lift an
   event of any version to the newest (one event may become several; an event without an
   ``event_version``, as ``new_event`` makes it, is taken as the newest);
2. **inbox**: an event id this consumer already processed is skipped (``skipped_duplicates``);
3. **guard**: :func:`casestream.handlers.runner.verdict` (the guard rule
   :func:`casestream.handlers.guard.decide`) per (aggregate type, aggregate id) with
   the consumer's ``first_seen`` policy: ``STALE`` is skipped, ``GAP`` holds the aggregate's
   events until the missing version is applied (then they drain in version order), or until
   :meth:`MemoryBus.park_expired` after ``gap_hold_s`` on the bus's clock dead-letters the first
   held event (reason ``version_gap``); every event counts for the guard, handled or not;
4. **handlers**: called by :class:`casestream.handlers.HandlerRunner`, the runner of the
   live consumer and of replay: those that run in ``mode`` (handler kinds), one event at a
   time (a batch handler gets a one-event list, as on the runtime's savepoint path),
   ``async def`` ones awaited;
5. **failures**: :func:`casestream.consumer.failures.classify`: a poison message is
   dead-lettered at once, any other failure is retried up to ``max_attempts`` (no backoff
   sleep) and then dead-lettered; an unknown event type is dead-lettered with ``strict_types``.
   What a failed attempt appended to the outbox is discarded.

Limits (the design): ``ctx.conn`` is the ``state`` object the test passes, not a database
connection, so a handler runs here only if it reaches its storage through a port built from
``ctx.conn`` (a repository factory the registry takes: PostgreSQL in the service, an
in-memory adapter here). SQL written on ``ctx.conn``/``ctx.cursor`` — a projection's upsert —
is not emulated (no other SQL dialect stands in for PostgreSQL's): in memory, test the
projection's pure row rule, or pass a ``state`` whose ``execute`` records each statement's
parameters (the rows it would write); test its SQL on PostgreSQL
(:class:`casestream.testing.Harness`, a service's integration or end-to-end tests).
``state`` is not rolled back when a handler fails (an in-memory adapter that is its own unit
of work can do it). One partition: events apply in publish order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from casestream.consumer import MemoryDeadLetters, Record
from casestream.consumer.deadletters import DeadLetter
from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.errors import PoisonMessageError
from casestream.events import Envelope
from casestream.handlers import FirstSeenPolicy, HandlerRegistry, HandlerRunner, ProcessingMode, Verdict
from casestream.handlers.runner import verdict
from casestream.outbox import headers_for

__all__ = ["ManualClock", "MemoryBus", "Published"]


class ManualClock:
    """A clock the test moves: ``clock()`` is the time (UTC), ``advance(seconds=...)`` moves it."""

    def __init__(self, at: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def now(self) -> datetime:
        return self.at

    def advance(self, delta: timedelta | None = None, **units: float) -> datetime:
        """Move the clock forward by ``delta`` or ``timedelta(**units)``; returns the new time."""
        self.at += delta if delta is not None else timedelta(**units)
        return self.at


@dataclass(frozen=True, slots=True)
class Published:
    """What ``publish`` did with one (upcast) event: ``outcome`` is ``applied``,
    ``duplicate`` (inbox), ``stale`` (guard), ``held`` (gap), ``unhandled`` or
    ``dead_lettered``."""

    event: Envelope
    outcome: str


class _Outbox:
    """``ctx.outbox``: appends are staged per attempt and kept only when its handlers succeed."""

    def __init__(self) -> None:
        self.staged: list[Envelope] = []

    def append(self, conn: Any, events: Sequence[Envelope]) -> None:
        self.staged.extend(events)


class MemoryBus:
    """Runs ``registry``'s handlers in memory as consumer ``consumer`` (module docstring).

    Attributes:
        emitted: events the handlers appended to the outbox, in order (committed ones only).
        dead_letters: the :class:`~casestream.consumer.MemoryDeadLetters` sink (``.sent``).
        clock: the :class:`ManualClock` (also what a saga or scheduler under test may use).
        skipped_duplicates, skipped_stale: counters of the inbox and the guard.
    """

    def __init__(self, registry: HandlerRegistry, *, state: Any = None, consumer: str = "test",
                 topic: str = "test.events", upcasters: Any = None,
                 first_seen: FirstSeenPolicy = FirstSeenPolicy.STRICT, strict_types: bool = False,
                 max_attempts: int = 3, gap_hold_s: float = 30.0,
                 mode: ProcessingMode = ProcessingMode.LIVE, clock: ManualClock | None = None) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts={max_attempts}: must be >= 1")
        self.registry, self.state, self.consumer, self.topic = registry, state, consumer, topic
        self.upcasters, self.first_seen, self.strict_types = upcasters, first_seen, strict_types
        self.max_attempts, self.gap_hold = max_attempts, timedelta(seconds=gap_hold_s)
        self.mode, self.clock = mode, clock or ManualClock()
        self.emitted: list[Envelope] = []
        self.dead_letters = MemoryDeadLetters()
        self.skipped_duplicates = self.skipped_stale = 0
        self._inbox: set[str] = set()
        self._versions: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], tuple[datetime, list[Envelope]]] = {}
        self._parked: set[tuple[str, str]] = set()
        self._offset = 0
        self._outbox = _Outbox()
        self.runner = HandlerRunner(consumer=consumer, handlers=registry, mode=mode,
                                    outbox=self._outbox)

    # ------------------------------------------------------------------ publishing
    def publish(self, *events: Envelope) -> list[Published]:
        """Deliver ``events`` in order; returns what happened to each upcast event."""
        out: list[Published] = []
        try:
            for event in events:
                # no event_version (new_event's default): the newest, as the outbox codec stamps it
                lifted = ([event] if self.upcasters is None or event.event_version is None
                          else self.upcasters.upcast_event(event))
                for e in lifted:
                    out.extend(self._deliver(e))
        finally:
            self.runner.close()  # the event loop of async handlers: none left open between calls
        return out

    def park_expired(self) -> list[Envelope]:
        """Dead-letter the first held event of each aggregate held longer than ``gap_hold_s``
        on :attr:`clock` (reason ``version_gap``); returns those events."""
        parked = []
        for key, (since, held) in list(self._held.items()):
            if held and self.clock() - since >= self.gap_hold and key not in self._parked:
                first = held[0]
                self._parked.add(key)
                self._dead_letter(first, "version_gap", "gap not filled in time", "GapParked", 1)
                parked.append(first)
        return parked

    def _deliver(self, event: Envelope) -> list[Published]:
        if event.event_id in self._inbox:
            self.skipped_duplicates += 1
            return [Published(event, "duplicate")]
        key = (event.aggregate_type, event.aggregate_id)
        try:
            found = verdict(self._versions.get(key), event.aggregate_version, self.first_seen)
        except PoisonMessageError as e:
            self._dead_letter(event, reason_of(e), str(e), error_class(e), 1)
            return [Published(event, "dead_lettered")]
        if found is Verdict.STALE:
            self.skipped_stale += 1
            self._inbox.add(event.event_id)
            return [Published(event, "stale")]
        if found is Verdict.GAP:
            since, held = self._held.get(key, (self.clock(), []))
            held.append(event)
            held.sort(key=lambda e: e.aggregate_version)
            self._held[key] = (since, held)
            return [Published(event, "held")]
        out = [self._apply(event)]
        self._versions[key] = event.aggregate_version
        out.extend(self._drain(key))
        return out

    def _drain(self, key: tuple[str, str]) -> list[Published]:
        out: list[Published] = []
        while key in self._held:
            since, held = self._held[key]
            nxt = held[0]
            if nxt.aggregate_version <= self._versions[key]:
                held.pop(0)
                self.skipped_stale += 1
            elif nxt.aggregate_version == self._versions[key] + 1:
                held.pop(0)
                out.append(self._apply(nxt))
                self._versions[key] = nxt.aggregate_version
            else:
                break
            if not held:
                del self._held[key]
                self._parked.discard(key)
        return out

    def _apply(self, event: Envelope) -> Published:
        self._inbox.add(event.event_id)
        handlers = self.runner.handlers_for(event.event_type)
        if not handlers:
            if self.strict_types and not self.registry.knows(event.event_type):
                self._dead_letter(event, "unknown_event_type",
                                  f"no handler for {event.event_type}", "PoisonMessageError", 1)
                return Published(event, "dead_lettered")
            return Published(event, "unhandled")
        self._offset += 1
        for attempt in range(1, self.max_attempts + 1):
            self._outbox.staged = []
            try:
                self.runner.call_each(self.state, handlers, (self.topic, 0, self._offset), event)
            except Exception as exc:  # noqa: BLE001 - classified like the runtime does
                poison = classify(exc) is FailureClass.POISON
                if poison or attempt == self.max_attempts:
                    self._dead_letter(event, reason_of(exc), str(exc), error_class(exc), attempt)
                    return Published(event, "dead_lettered")
                continue
            self.emitted.extend(self._outbox.staged)
            return Published(event, "applied")
        raise AssertionError("unreachable")  # pragma: no cover

    def _dead_letter(self, event: Envelope, reason: str, message: str, error: str,
                     attempts: int) -> None:
        headers = tuple((k, v) for k, v in headers_for(
            event.event_id, event.event_type, event.event_version, event.traceparent,
            event.correlation_id) if v is not None)
        record = Record(topic=self.topic, partition=0, offset=self._offset,
                        key=event.aggregate_id.encode(), value=None, headers=headers)
        at = self.clock()
        self.dead_letters.send(DeadLetter(
            record=record, error_class=error, reason=reason, message=message, attempts=attempts,
            first_failure=at, last_failure=at, correlation_id=event.correlation_id,
            traceparent=event.traceparent, event_id=event.event_id, event_type=event.event_type))

    # ------------------------------------------------------------------ reading
    @property
    def dead_lettered(self) -> list[tuple[str, str]]:
        """``(event id, reason)`` of each dead letter, in order."""
        return [(dl.event_id or "", dl.reason) for dl in self.dead_letters.sent]

    def last_version(self, aggregate_type: str, aggregate_id: str) -> int | None:
        """The guard's recorded version of the aggregate (None: never applied)."""
        return self._versions.get((aggregate_type, aggregate_id))

