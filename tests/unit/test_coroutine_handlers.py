"""Coroutine (``async def``) handlers on the fast path: awaited concurrently over aggregates,
in order within one, at most ``concurrency`` at once; a failure is pinned to its message."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_fast import FastPath, GuardCache
from casestream.consumer.batch_model import Item
from casestream.handlers.guard import FirstSeenPolicy
from casestream.consumer.handlerloop import HandlerLoop
from casestream.handlers.registry import DiscardingOutbox, HandlerKind, HandlerRegistry
from casestream.consumer.keyworkers import worker_threads
from casestream.handlers.processing import ProcessingMode
from casestream.consumer.records import ConsumerStats, Record
from casestream.testing.consumer import make_event
from tests.support.events import case_returned


class Calls:
    """An async handler that waits a little and records what ran and how many at once."""

    def __init__(self, fail: str | None = None) -> None:
        self.order: list[tuple[str, int]] = []
        self.now = self.most = 0
        self.fail = fail

    async def handle(self, ctx: Any, event: Any) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.001 * (event.aggregate_version % 3))
            if event.event_id == self.fail:
                raise ValueError("external call refused")
            self.order.append((event.aggregate_id, event.aggregate_version))
        finally:
            self.now -= 1


def _fast(registry: HandlerRegistry, concurrency: int, loop: HandlerLoop | None = None) -> FastPath:
    dispatch = Dispatcher(consumer="c", handlers=registry, mode=ProcessingMode.LIVE,
                          outbox=DiscardingOutbox(), first_seen=FirstSeenPolicy.STRICT,
                          strict_types=False, redrive_topic="c.redrive", loop=loop)
    return FastPath(consumer="c", dispatch=dispatch, failures=None,  # type: ignore[arg-type]
                    cache=GuardCache(0), stats=ConsumerStats(), pipeline=False,
                    concurrency=concurrency)


def _run(fast: FastPath, items: list[Item]) -> int:
    """The fast path's handler phase on ``items`` (no connection: the handlers use none)."""
    try:
        return fast._handlers(None, items)  # noqa: SLF001 - the wave under test
    finally:
        fast.dispatch.close()


def _items(aggregates: int, versions: int) -> list[Item]:
    evs = [case_returned(f"A{a}", v) for v in range(1, versions + 1) for a in range(aggregates)]
    return [Item(Record("t", 0, i, e.aggregate_id.encode(), b""), e) for i, e in enumerate(evs)]


def test_aggregates_are_awaited_at_once_up_to_the_limit_each_in_order() -> None:
    calls = Calls()
    registry = HandlerRegistry()
    registry.add("CaseReturned", calls.handle, kind=HandlerKind.PROJECTION)
    fast = _fast(registry, concurrency=4)
    items = _items(aggregates=10, versions=5)
    assert _run(fast, items) == 0
    assert calls.most == 4
    assert sorted(calls.order) == sorted((it.env.aggregate_id, it.env.aggregate_version)
                                         for it in items)
    for a in range(10):
        assert [v for agg, v in calls.order if agg == f"A{a}"] == [1, 2, 3, 4, 5]


def test_concurrency_one_awaits_one_call_at_a_time_in_offset_order() -> None:
    calls = Calls()
    registry = HandlerRegistry()
    registry.add("CaseReturned", calls.handle, kind=HandlerKind.PROJECTION)
    fast = _fast(registry, concurrency=1)
    items = _items(aggregates=3, versions=2)
    _run(fast, items)
    assert calls.most == 1
    assert calls.order == [(it.env.aggregate_id, it.env.aggregate_version) for it in items]


def test_a_failing_call_is_pinned_to_its_message_and_stops_its_aggregate() -> None:
    items = _items(aggregates=6, versions=3)
    bad = items[7]  # A1 v2
    calls = Calls(fail=bad.env.event_id)
    registry = HandlerRegistry()
    registry.add("CaseReturned", calls.handle, kind=HandlerKind.PROJECTION)
    fast = _fast(registry, concurrency=3)
    with pytest.raises(ValueError, match="external call refused"):
        _run(fast, items)
    assert fast.handler_failure is not None
    assert fast.handler_failure[0] == id(bad.rec)
    assert ("A1", 3) not in calls.order  # nothing after the failure of its aggregate


def test_a_plain_handler_between_coroutine_ones_runs_in_its_place() -> None:
    seen: list[str] = []
    registry = HandlerRegistry()

    async def slow(ctx: Any, e: Any) -> None:
        await asyncio.sleep(0.002)
        seen.append(f"async {e.aggregate_id}")

    registry.add("CaseReturned", slow, kind=HandlerKind.PROJECTION)
    registry.add("CaseClosed", lambda ctx, e: seen.append(f"plain {e.aggregate_id}"),
                 kind=HandlerKind.PROJECTION)
    items = _items(aggregates=2, versions=1)
    closed = make_event("B", 1, event_type="CaseClosed")
    items.insert(1, Item(Record("t", 0, 99, b"B", b""), closed))
    fast = _fast(registry, concurrency=8)
    _run(fast, items)
    assert seen == ["async A0", "plain B", "async A1"]


def test_coroutine_handlers_take_one_worker_thread_per_eight_calls() -> None:
    assert worker_threads(64, coroutines=True) == 8
    assert worker_threads(20, coroutines=True) == 3
    assert worker_threads(8, coroutines=True) == 1
    assert worker_threads(64, coroutines=False) == 64
    registry = HandlerRegistry()

    async def mail(ctx: Any, e: Any) -> None: ...

    registry.add("CaseReturned", mail, kind=HandlerKind.SIDE_EFFECT)
    assert not registry.awaits(ProcessingMode.LIVE)  # never on the fast path: a thread per call
    registry.add("CaseReturned", mail, kind=HandlerKind.PROJECTION)
    assert registry.awaits(ProcessingMode.LIVE) and registry.awaits(ProcessingMode.REPLAY)


def test_the_savepoint_path_awaits_a_coroutine_handler_to_its_end() -> None:
    calls = Calls()
    registry = HandlerRegistry()
    registry.add("CaseReturned", calls.handle, kind=HandlerKind.PROJECTION)
    fast = _fast(registry, concurrency=1)
    [it] = _items(aggregates=1, versions=1)
    try:
        assert fast.dispatch.run_item(None, it) == 0
    finally:
        fast.dispatch.close()
    assert calls.order == [("A0", 1)]


# ---------------------------------------------------------------- one loop for every worker


def _units(calls: Calls, loop: HandlerLoop, units: int) -> list[FastPath]:
    registry = HandlerRegistry()
    registry.add("CaseReturned", calls.handle, kind=HandlerKind.PROJECTION)
    return [_fast(registry, concurrency=loop.calls, loop=loop) for _ in range(units)]


def _on_threads(fasts: list[FastPath], items_of: list[list[Item]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def apply(fast: FastPath, items: list[Item]) -> None:
        try:
            fast._handlers(None, items)  # noqa: SLF001 - the wave under test
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=apply, args=(f, i)) for f, i in zip(fasts, items_of)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_units_of_several_worker_threads_share_the_loops_calls() -> None:
    calls = Calls()
    loop = HandlerLoop("c", 6)
    try:
        fasts = _units(calls, loop, units=3)
        items_of = [[Item(it.rec, it.env) for it in _items(aggregates=10, versions=4)]
                    for _ in fasts]
        assert _on_threads(fasts, items_of) == []
    finally:
        loop.close()
    assert calls.most == 6  # three units, each allowed 6 calls: 6 at once in all
    assert len(calls.order) == 3 * 40
    for a in range(10):  # each unit's aggregate in order (three units: three runs of 1..4)
        assert sorted(v for agg, v in calls.order if agg == f"A{a}") == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]


def test_one_unit_alone_may_take_every_call_of_the_loop() -> None:
    # the slots are not split per worker thread: a unit whose neighbours are committing
    # uses the calls they leave
    calls = Calls()
    loop = HandlerLoop("c", 8)
    try:
        [fast] = _units(calls, loop, units=1)
        assert _on_threads([fast], [_items(aggregates=20, versions=2)]) == []
    finally:
        loop.close()
    assert calls.most == 8


def test_a_failure_on_the_shared_loop_is_raised_in_its_unit_only() -> None:
    items = _items(aggregates=6, versions=3)
    bad = items[7]  # A1 v2
    calls = Calls(fail=bad.env.event_id)
    loop = HandlerLoop("c", 4)
    try:
        fasts = _units(calls, loop, units=2)
        other = _items(aggregates=6, versions=3)
        errors = _on_threads(fasts, [items, [Item(it.rec, it.env) for it in other]])
    finally:
        loop.close()
    assert [str(e) for e in errors] == ["external call refused"]
    assert fasts[0].handler_failure is not None and fasts[0].handler_failure[0] == id(bad.rec)
    assert fasts[1].handler_failure is None


def test_a_closed_handler_loop_refuses_work() -> None:
    loop = HandlerLoop("c", 2)
    loop.close()

    async def nothing() -> None: ...

    with pytest.raises(RuntimeError, match="closed"):
        loop.run(nothing())
    with pytest.raises(ValueError, match="calls must be >= 1"):
        HandlerLoop("c", 0)
