"""One scenario run on the in-memory bus (casestream.testing.MemoryBus, a unit test) and on the
real consumer runtime (Kafka + PostgreSQL, an integration test): the same events in must give
the same handler calls, inbox and guard decisions and dead letters out.

A :class:`Driver` delivers events in order on one partition, lets the gap-hold time pass
(``expire_gaps``: the bus's clock, the runtime's wall clock) and reports what happened once
everything settled.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from casestream.errors import PoisonMessageError
from casestream.events import Envelope
from casestream.testing.consumer import make_event

from casestream.handlers import HandlerKind, HandlerRegistry

MAX_ATTEMPTS = 2
GAP_HOLD_S = 4.0


class Calls:
    """Handler calls that completed: ``(aggregate id, version)`` in call order (thread-safe)."""

    def __init__(self) -> None:
        self.done: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def add(self, event: Envelope) -> None:
        with self._lock:
            self.done.append((event.aggregate_id, event.aggregate_version))


def registry(calls: Calls) -> HandlerRegistry:
    """A PROCESS handler of ``CaseReturned``: ``reason`` ``poison`` raises a poison message,
    ``fail`` fails every attempt, anything else is recorded in ``calls``."""
    reg = HandlerRegistry()

    @reg.on("CaseReturned", kind=HandlerKind.PROCESS)
    def returned(ctx: Any, event: Envelope) -> None:
        reason = event.payload["reason"]
        if reason == "poison":
            raise PoisonMessageError("reason 'poison' is refused", reason="validation")
        if reason == "fail":
            raise RuntimeError("always fails")
        calls.add(event)

    return reg


class Driver(Protocol):
    def deliver(self, events: list[Envelope]) -> None: ...

    def expire_gaps(self) -> None: ...

    def settled(self, calls: int, dead_letters: int) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
        """``(calls, dead letters as (event id, reason))`` once that many of each are seen."""
        ...

    def last_version(self, aggregate_id: str) -> int | None: ...


def event(aggregate_id: str, version: int, reason: str = "ok") -> Envelope:
    return make_event(aggregate_id, version, event_type="CaseReturned", payload={"reason": reason})


def run_scenario(driver: Driver) -> None:
    a1, a2 = event("A", 1), event("A", 2)
    b1, b2, b3 = event("B", 1), event("B", 2), event("B", 3)
    poison, failing = event("P", 1, "poison"), event("F", 1, "fail")
    g1, g3 = event("G", 1), event("G", 3)
    stale_a1 = event("A", 1)  # another copy of version 1 (a new event id)
    driver.deliver([a1, a2, a2, stale_a1, b2, b3, poison, failing, b1, g1, g3])
    calls, dead = driver.settled(calls=6, dead_letters=2)
    assert calls == [("A", 1), ("A", 2), ("B", 1), ("B", 2), ("B", 3), ("G", 1)]
    assert sorted(dead) == sorted([(poison.event_id, "validation"),
                                   (failing.event_id, "retries_exhausted")])
    assert [driver.last_version(x) for x in "ABG"] == [2, 3, 1]
    driver.expire_gaps()  # G v2 never comes: G v3 is dead-lettered as a version gap
    calls, dead = driver.settled(calls=6, dead_letters=3)
    assert (g3.event_id, "version_gap") in dead and len(calls) == 6
    assert driver.last_version("G") == 1
