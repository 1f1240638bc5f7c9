"""The one runner under the live consumer and replay (``casestream.handlers.runner``): runs,
contexts, sync and async calls, verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from casestream.errors import PoisonMessageError
from casestream.handlers import (
    DiscardingOutbox,
    FirstSeenPolicy,
    HandlerKind,
    HandlerRegistry,
    HandlerRunner,
    ProcessingMode,
    Verdict,
)
from casestream.handlers.runner import verdict
from casestream.testing import make_event


class Conn:
    def cursor(self) -> object:
        return object()


def _runner(registry: HandlerRegistry, mode: ProcessingMode = ProcessingMode.LIVE) -> HandlerRunner:
    return HandlerRunner(consumer="c", handlers=registry, mode=mode, outbox=DiscardingOutbox())


def test_one_batch_handler_of_several_types_gets_one_run_and_per_event_handlers_one_each() -> None:
    registry = HandlerRegistry()
    batch = lambda ctx, events: None  # noqa: E731
    registry.add_batch("A", batch, kind=HandlerKind.PROJECTION)
    registry.add_batch("B", batch, kind=HandlerKind.PROJECTION)
    registry.add("C", lambda ctx, e: None, kind=HandlerKind.PROJECTION)
    types = ["A", "B", "A", "C", "C", "Z", "B"]
    runs = _runner(registry).runs(types, lambda t: t)
    assert [(items, is_batch) for items, _hs, is_batch in runs] == [
        (["A", "B", "A"], True), (["C"], False), (["C"], False), (["Z"], False), (["B"], True)]
    assert runs[3][1] == ()  # no handler


def test_calls_run_every_handler_of_an_event_in_order_and_await_coroutines() -> None:
    calls: list[Any] = []
    registry = HandlerRegistry()

    @registry.on("A", kind=HandlerKind.PROJECTION)
    def first(ctx: Any, e: Any) -> None:
        calls.append(("first", e.aggregate_version, ctx.positions))

    @registry.on("A", kind=HandlerKind.PROCESS)
    async def second(ctx: Any, e: Any) -> None:
        calls.append(("second", e.aggregate_version, ctx.mode))

    for mode in (ProcessingMode.LIVE, ProcessingMode.REPLAY):
        runner = _runner(registry, mode)
        try:
            for v in (1, 2):
                event = make_event("x", v, event_type="A")
                runner.call_each(Conn(), runner.handlers_for("A"), ("t", 0, v), event)
        finally:
            runner.close()
    assert calls == [("first", 1, (("t", 0, 1),)), ("second", 1, ProcessingMode.LIVE),
                     ("first", 2, (("t", 0, 2),)), ("second", 2, ProcessingMode.LIVE),
                     ("first", 1, (("t", 0, 1),)), ("first", 2, (("t", 0, 2),))]  # REPLAY: projections


def test_a_batch_call_gets_the_run_and_its_positions_and_a_failure_names_its_handler() -> None:
    seen: list[Any] = []
    registry = HandlerRegistry()

    @registry.on_batch("A", kind=HandlerKind.PROJECTION)
    def project(ctx: Any, events: Any) -> None:
        seen.append((ctx.offset, ctx.positions, [e.aggregate_version for e in events]))
        if len(events) > 2:
            raise ValueError("too many")

    runner = _runner(registry, ProcessingMode.REPLAY)
    hs = runner.handlers_for("A")
    events = [make_event("x", v, event_type="A") for v in (1, 2)]
    runner.call_batch(Conn(), hs, [("t", 0, 5), ("t", 0, 6)], events)
    assert seen == [(5, (("t", 0, 5), ("t", 0, 6)), [1, 2])]
    with pytest.raises(RuntimeError, match="project at 7") as raised:
        runner.call_batch(Conn(), hs, [("t", 0, 7), ("t", 0, 8), ("t", 0, 9)], [*events, events[0]],
                          lambda h, pos, e: RuntimeError(f"{h.name.rpartition('.')[2]} at {pos[2]}: {e}"))
    assert isinstance(raised.value.__cause__, ValueError)


def test_verdict_is_the_guard_rule_and_an_invalid_version_is_poison() -> None:
    assert verdict(None, 1, FirstSeenPolicy.STRICT) is Verdict.APPLY
    assert verdict(3, 3, FirstSeenPolicy.STRICT) is Verdict.STALE
    assert verdict(3, 5, FirstSeenPolicy.BASELINE) is Verdict.GAP
    with pytest.raises(PoisonMessageError, match="aggregate_version must be >= 1"):
        verdict(None, 0, FirstSeenPolicy.STRICT)
