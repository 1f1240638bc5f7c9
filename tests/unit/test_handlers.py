"""Unit tests of the handler registry: dispatch by type, kinds per processing mode, strict-mode knowledge."""

from __future__ import annotations

import pytest

from casestream.handlers.registry import DiscardingOutbox, HandlerContext, HandlerKind, HandlerRegistry
from casestream.handlers.processing import ProcessingMode


def test_handlers_dispatch_by_type_in_registration_order() -> None:
    registry = HandlerRegistry()
    calls: list[str] = []

    @registry.on("CaseOpened", kind=HandlerKind.PROJECTION)
    def first(ctx: HandlerContext, event: object) -> None:
        calls.append("first")

    @registry.on("CaseOpened", kind=HandlerKind.PROCESS)
    def second(ctx: HandlerContext, event: object) -> None:
        calls.append("second")

    registry.add("CaseClosed", lambda ctx, ev: calls.append("closed"), kind=HandlerKind.PROJECTION)

    for h in registry.handlers_for("CaseOpened", ProcessingMode.LIVE):
        h.fn(None, None)  # type: ignore[arg-type]
    assert calls == ["first", "second"]
    assert registry.handlers_for("CaseSubmitted", ProcessingMode.LIVE) == ()
    assert registry.event_types == frozenset({"CaseOpened", "CaseClosed"})
    assert first.__name__ == "first"  # the decorator returns the function unchanged


def test_replay_runs_projections_only() -> None:
    registry = HandlerRegistry()
    for kind in HandlerKind:
        registry.add("NoticeRequested", lambda ctx, ev: None, kind=kind)
    live = {h.kind for h in registry.handlers_for("NoticeRequested", ProcessingMode.LIVE)}
    replay = {h.kind for h in registry.handlers_for("NoticeRequested", ProcessingMode.REPLAY)}
    assert live == set(HandlerKind)
    assert replay == {HandlerKind.PROJECTION}
    assert registry.has_side_effects("NoticeRequested", ProcessingMode.LIVE)
    assert not registry.has_side_effects("NoticeRequested", ProcessingMode.REPLAY)


def test_ignored_types_are_known_but_have_no_handlers() -> None:
    registry = HandlerRegistry()
    registry.add("CaseSubmitted", lambda ctx, ev: None, kind=HandlerKind.PROCESS)
    registry.ignore("CaseAssigned")
    assert registry.knows("CaseSubmitted") and registry.knows("CaseAssigned")
    assert not registry.knows("CaseOpened")
    assert registry.handlers_for("CaseAssigned", ProcessingMode.LIVE) == ()


def test_registration_rejects_bad_arguments() -> None:
    registry = HandlerRegistry()
    with pytest.raises(ValueError):
        registry.on("", kind=HandlerKind.PROJECTION)
    with pytest.raises(ValueError):
        registry.on("CaseOpened", kind="projection")  # type: ignore[arg-type]


def test_merge_keeps_order_and_ignores() -> None:
    a, b = HandlerRegistry(), HandlerRegistry()
    a.add("X", lambda ctx, ev: None, kind=HandlerKind.PROJECTION)
    b.add("X", lambda ctx, ev: None, kind=HandlerKind.PROCESS)
    b.ignore("Y")
    merged = a.merge([b])
    assert [h.kind for h in merged.handlers_for("X", ProcessingMode.LIVE)] == [
        HandlerKind.PROJECTION, HandlerKind.PROCESS]
    assert merged.knows("Y")


def test_discarding_outbox_counts_dropped_events() -> None:
    outbox = DiscardingOutbox()
    outbox.append(object(), [object(), object()])
    assert outbox.discarded == 2


def test_context_is_frozen() -> None:
    ctx = HandlerContext(conn=None, outbox=DiscardingOutbox(), mode=ProcessingMode.LIVE,
                         consumer="audit.journal")
    with pytest.raises(AttributeError):
        ctx.consumer = "other"  # type: ignore[misc]


def test_registration_after_a_lookup_is_seen() -> None:
    registry = HandlerRegistry()
    assert registry.handlers_for("CaseOpened", ProcessingMode.LIVE) == ()
    registry.add("CaseOpened", lambda ctx, ev: None, kind=HandlerKind.PROJECTION)
    assert len(registry.handlers_for("CaseOpened", ProcessingMode.LIVE)) == 1
    registry.add_batch("CaseOpened", lambda ctx, evs: None, kind=HandlerKind.PROJECTION)
    hs = registry.handlers_for("CaseOpened", ProcessingMode.LIVE)
    assert [h.batch for h in hs] == [False, True]


def test_batch_handlers_receive_one_event_lists_when_called_singly() -> None:
    registry = HandlerRegistry()
    got: list[object] = []
    registry.add_batch("X", lambda ctx, evs: got.append(list(evs)), kind=HandlerKind.PROCESS)
    [h] = registry.handlers_for("X", ProcessingMode.LIVE)
    h.call(None, "event")  # type: ignore[arg-type]
    assert got == [["event"]]
    with pytest.raises(ValueError):
        registry.on_batch("X", kind=HandlerKind.SIDE_EFFECT)


def test_a_side_effect_handler_registered_after_a_lookup_is_seen() -> None:
    registry = HandlerRegistry()
    registry.on("CaseOpened", kind=HandlerKind.PROJECTION)(lambda ctx, ev: None)
    assert not registry.has_side_effects("CaseOpened", ProcessingMode.LIVE)
    registry.on("CaseOpened", kind=HandlerKind.SIDE_EFFECT)(lambda ctx, ev: None)
    assert registry.has_side_effects("CaseOpened", ProcessingMode.LIVE)
    assert not registry.has_side_effects("CaseOpened", ProcessingMode.REPLAY)
