"""The in-memory consumer (casestream.testing.memory.MemoryBus): the runtime's inbox, guard,
upcasting, handler kinds and failure rules without Kafka or PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from casestream.errors import PoisonMessageError
from casestream.events import Envelope, UpcasterChain, new_event
from casestream.testing.memory import ManualClock, MemoryBus

from casestream.handlers import FirstSeenPolicy, HandlerKind, HandlerRegistry, ProcessingMode


def event(version: int, event_type: str = "ThingChanged", thing: str = "t-1",
          event_version: int = 1, **payload: Any) -> Envelope:
    e = new_event(event_type=event_type, aggregate_type="thing", aggregate_id=thing,
                  aggregate_version=version, payload=payload or {"n": version}, tenant_id="t",
                  source="test", actor_id="tester", correlation_id=thing)
    return _with_version(e, event_version)


def _with_version(e: Envelope, v: int) -> Envelope:
    from dataclasses import replace
    return replace(e, event_version=v)


class Seen:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail: dict[int, BaseException] = {}
        self.failures = 0


def registry() -> HandlerRegistry:
    reg = HandlerRegistry()

    @reg.on("ThingChanged", kind=HandlerKind.PROCESS)
    def changed(ctx: Any, e: Envelope) -> None:
        seen: Seen = ctx.conn
        ctx.outbox.append(ctx.conn, [event(1, "ThingNoticed", thing=e.aggregate_id + "-n")])
        if e.aggregate_version in seen.fail and seen.failures < 2:
            seen.failures += 1
            raise seen.fail[e.aggregate_version]
        seen.calls.append((e.aggregate_id, e.aggregate_version))

    @reg.on_batch("ThingProjected", kind=HandlerKind.PROJECTION)
    async def projected(ctx: Any, events: Sequence[Envelope]) -> None:
        ctx.conn.calls.extend(("projected", e.aggregate_version) for e in events)

    reg.ignore("ThingIgnored")
    return reg


def test_applies_in_order_and_keeps_what_the_handlers_emitted() -> None:
    seen = Seen()
    bus = MemoryBus(registry(), state=seen)
    started = time.perf_counter()
    outcomes = bus.publish(event(1), event(2), event(3, "ThingProjected"))
    print(f"3 events through the memory bus in {1000 * (time.perf_counter() - started):.2f} ms")
    assert [o.outcome for o in outcomes] == ["applied"] * 3
    assert seen.calls == [("t-1", 1), ("t-1", 2), ("projected", 3)]
    assert [e.event_type for e in bus.emitted] == ["ThingNoticed", "ThingNoticed"]
    assert bus.last_version("thing", "t-1") == 3


def test_inbox_skips_a_redelivered_event_and_the_guard_a_stale_copy() -> None:
    seen = Seen()
    bus = MemoryBus(registry(), state=seen)
    first = event(1)
    bus.publish(first, event(2))
    outcomes = bus.publish(first, event(1))
    assert [o.outcome for o in outcomes] == ["duplicate", "stale"]
    assert (bus.skipped_duplicates, bus.skipped_stale) == (1, 1) and len(seen.calls) == 2


def test_a_gap_holds_the_aggregate_until_filled_or_parked() -> None:
    seen, clock = Seen(), ManualClock()
    bus = MemoryBus(registry(), state=seen, clock=clock, gap_hold_s=30)
    two, three = event(2), event(3)
    assert [o.outcome for o in bus.publish(two, three, event(1, thing="other"))] == [
        "held", "held", "applied"]
    assert [o.outcome for o in bus.publish(event(1))] == ["applied", "applied", "applied"]
    assert seen.calls == [("other", 1), ("t-1", 1), ("t-1", 2), ("t-1", 3)]
    five = event(5)
    bus.publish(five)
    clock.advance(seconds=29)
    assert bus.park_expired() == []
    clock.advance(seconds=1)
    assert bus.park_expired() == [five] and bus.park_expired() == []
    assert bus.dead_lettered == [(five.event_id, "version_gap")]


def test_poison_is_dead_lettered_at_once_other_failures_after_the_attempts() -> None:
    seen = Seen()
    seen.fail = {1: PoisonMessageError("bad amount", reason="validation"), 2: RuntimeError("flaky")}
    bus = MemoryBus(registry(), state=seen, max_attempts=3)
    poison, flaky = event(1), event(2)
    assert [o.outcome for o in bus.publish(poison, flaky)] == ["dead_lettered", "applied"]
    assert bus.dead_lettered == [(poison.event_id, "validation")]
    assert seen.calls == [("t-1", 2)] and len(bus.emitted) == 1  # failed attempts' appends dropped
    seen.failures, seen.fail = 0, {3: RuntimeError("down")}
    once = MemoryBus(registry(), state=seen, max_attempts=1, first_seen=FirstSeenPolicy.BASELINE)
    assert [o.outcome for o in once.publish(event(3))] == ["dead_lettered"]
    assert once.dead_letters.sent[0].reason == "retries_exhausted"


def test_unknown_types_kinds_and_upcasters() -> None:
    seen = Seen()
    chain = UpcasterChain()
    chain.add("ThingChanged", 1, lambda p: {**p, "n": p["n"] * 10})
    bus = MemoryBus(registry(), state=seen, upcasters=chain, strict_types=True)
    old, ignored, unknown = event(1), event(2, "ThingIgnored"), event(3, "Mystery")
    outcomes = bus.publish(old, ignored, unknown)
    assert [o.outcome for o in outcomes] == ["applied", "unhandled", "dead_lettered"]
    assert outcomes[0].event.event_version == 2 and outcomes[0].event.payload == {"n": 10}
    assert bus.dead_lettered == [(unknown.event_id, "unknown_event_type")]
    replay = MemoryBus(registry(), state=Seen(), mode=ProcessingMode.REPLAY)
    assert [o.outcome for o in replay.publish(event(1), event(2, "ThingProjected"))] == [
        "unhandled", "applied"]  # PROCESS handlers do not run in a replay
