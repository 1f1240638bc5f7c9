"""Event upcasters (split, rename, drop, envelope fields), their verification, and their results
through the codec, the consumer's dispatch and the replay applier: the same events in the
same order on every path, with the same ids."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from casestream.handlers import HandlerKind, HandlerRegistry, ProcessingMode
from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_model import decode_record, item_of
from casestream.handlers.guard import FirstSeenPolicy
from casestream.handlers.registry import DiscardingOutbox
from casestream.consumer.records import Record
from casestream.errors import PoisonMessageError, UpcasterChainError
from casestream.events import (
    EnvelopeCodec,
    InMemoryRegistry,
    UpcastError,
    UpcasterChain,
    derived_event_id,
    load_catalog,
)
from casestream.replay.applier import ReplayApplier
from casestream.replay.progress import Progress
from tests.support.evolution import split_thing_updated, thing_catalog, thing_event, thing_upcasters

NEWEST = {"ThingNoted": 5, "ThingFlagged": 1, "ThingUpdated": 1}


def legacy(note: str | None = "n", flag: str | None = "f", **kw: Any) -> Any:
    return thing_event("ThingUpdated", {"note": note, "flag": flag}, version=1, **kw)


def test_a_legacy_event_is_split_in_order_with_deterministic_ids() -> None:
    chain = thing_upcasters()
    src = legacy(aggregate_version=4)
    first, second = chain.upcast_event(src)
    assert (first.event_type, first.event_version, first.payload) == ("ThingNoted", 5, {"note": "n", "kind": "B"})
    assert (second.event_type, second.payload) == ("ThingFlagged", {"flag": "f"})
    assert first.event_id == src.event_id
    assert second.event_id == derived_event_id(src.event_id, 1) != src.event_id
    assert [e.event_id for e in chain.upcast_event(src)] == [first.event_id, second.event_id]
    assert {e.aggregate_version for e in (first, second)} == {4}
    assert second.causation_id == src.event_id  # an envelope field the step adjusted


def test_zero_one_or_several_results() -> None:
    chain = thing_upcasters()
    assert chain.upcast_event(legacy(None, None)) == []
    src = legacy(None, "f")
    [only] = chain.upcast_event(src)
    assert only.event_type == "ThingFlagged"  # a rename: the first result keeps the id
    assert only.event_id == src.event_id


@pytest.mark.parametrize(("change", "field"), [
    ({"aggregate_id": "other"}, "aggregate_id"),
    ({"aggregate_type": "case"}, "aggregate_type"),
    ({"aggregate_version": 9}, "aggregate_version"),
    ({"event_id": "00000000-0000-4000-8000-000000000001"}, "event_id"),
])
def test_a_step_may_not_change_the_identity_of_the_stored_event(change: dict[str, Any], field: str) -> None:
    chain = UpcasterChain()
    chain.add_event("ThingUpdated", 1, lambda e: [dataclasses.replace(e, event_type="ThingFlagged", **change)],
                    produces=[("ThingFlagged", 1)])
    with pytest.raises(UpcastError, match=f"{field} .*may not change"):
        chain.upcast_event(legacy())


def test_a_result_the_step_did_not_declare_is_refused() -> None:
    chain = UpcasterChain()
    chain.add_event("ThingUpdated", 1, lambda e: [dataclasses.replace(e, event_type="ThingNoted")],
                    produces=[("ThingFlagged", 1)])
    with pytest.raises(UpcastError, match="ThingNoted v1, not declared"):
        chain.upcast_event(legacy())


def test_payload_only_upcasters_keep_their_api() -> None:
    chain = thing_upcasters()
    assert chain.upcast("ThingNoted", 2, {"note": "x", "kind": "A"}) == (5, {"note": "x", "kind": "A"})
    assert chain.payload_only("ThingNoted", 1) and not chain.payload_only("ThingUpdated", 1)
    [e] = chain.upcast_event(thing_event("ThingNoted", {"note": "x", "kind": "A"}, version=2))
    assert e.event_version == 5


@pytest.mark.parametrize(("build", "message"), [
    (lambda c: c.add_event("ThingUpdated", 1, split_thing_updated, produces=[("ThingGone", 1)]),
     "produces ThingGone v1, which is not in the catalog"),
    (lambda c: c.add_event("ThingUpdated", 1, split_thing_updated, produces=[("ThingNoted", 6)]),
     "produces ThingNoted v6, which is not in the catalog"),
    (lambda c: (c.add_event("ThingUpdated", 1, split_thing_updated, produces=[("ThingFlagged", 1)]),
                c.add_event("ThingFlagged", 1, split_thing_updated, produces=[("ThingUpdated", 1)])),
     "upcaster loop ThingFlagged v1 -> ThingUpdated v1 -> ThingFlagged v1"),
])
def test_the_chain_is_verified_at_start_up_in_one_line(build: Any, message: str) -> None:
    chain = UpcasterChain()
    for v in range(1, 5):
        chain.add("ThingNoted", v, dict)
    build(chain)
    with pytest.raises(UpcasterChainError, match=message) as e:
        chain.verify(NEWEST)
    assert "\n" not in str(e.value)


def test_a_missing_step_fails_verification() -> None:
    chain = thing_upcasters()
    chain._steps.pop(("ThingNoted", 3))
    with pytest.raises(UpcasterChainError, match="missing upcaster ThingNoted v3->v4"):
        chain.verify(NEWEST)


def test_an_event_step_at_the_newest_version_is_not_dangling() -> None:
    thing_upcasters().verify(NEWEST)  # ThingUpdated v1 is its newest: a split, not a gap


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> EnvelopeCodec:
    catalog = load_catalog(thing_catalog(tmp_path_factory.mktemp("things"), "unitthing"))
    c = EnvelopeCodec(catalog, InMemoryRegistry(), thing_upcasters())
    c.prepare(auto_register=True)
    return c


def test_codec_decode_message_yields_the_split_and_decode_refuses_two(codec: EnvelopeCodec) -> None:
    src = legacy()
    value = codec.encode(src)
    m = codec.decode_message(value)
    assert m.source.event_type == "ThingUpdated" and m.source.event_id == src.event_id
    assert [e.event_type for e in m.events] == ["ThingNoted", "ThingFlagged"]
    assert codec.decode_message(value) == m  # the same every time
    with pytest.raises(PoisonMessageError, match="make 2 events") as e:
        codec.decode(value)
    assert e.value.reason == "upcast"
    assert codec.decode(codec.encode(legacy(None, "f"))).event_type == "ThingFlagged"


def test_a_failing_step_is_a_poison_message_naming_it(tmp_path: Path) -> None:
    catalog = load_catalog(thing_catalog(tmp_path, "unitbad"))
    chain = thing_upcasters()
    chain._events.pop(("ThingUpdated", 1))
    chain.add_event("ThingUpdated", 1, lambda e: [dataclasses.replace(e, aggregate_id="x")],
                    produces=[("ThingFlagged", 1)])
    c = EnvelopeCodec(catalog, InMemoryRegistry(), chain)
    c.prepare(auto_register=True)
    with pytest.raises(PoisonMessageError, match="aggregate_id may not change") as e:
        c.decode_message(c.encode(legacy()))
    assert e.value.reason == "upcast"


def _record(value: bytes, offset: int = 7) -> Record:
    return Record(topic="outbox.event.thing", partition=0, offset=offset, key=b"k", value=value)


def test_the_consumer_dispatches_every_derived_event_of_one_record(codec: EnvelopeCodec) -> None:
    seen: list[tuple[str, int]] = []
    handlers = HandlerRegistry()
    for t in ("ThingNoted", "ThingFlagged"):
        handlers.add(t, lambda ctx, e: seen.append((e.event_type, ctx.offset)), kind=HandlerKind.PROJECTION)
    dispatch = Dispatcher(consumer="c", handlers=handlers, mode=ProcessingMode.LIVE, outbox=DiscardingOutbox(),
                          first_seen=FirstSeenPolicy.STRICT, strict_types=True, redrive_topic="c.redrive")
    src = legacy(aggregate_version=1)
    it = item_of(_record(b""), decode_record(codec, codec.encode(src), None))
    assert it.env.event_id == src.event_id and it.entry().aggregate_version == 1
    assert dispatch.run_item(None, it) == 0
    assert seen == [("ThingNoted", 7), ("ThingFlagged", 7)]
    runs = dispatch.runs([it])
    assert [r[0][0].env.event_type for r in runs] == ["ThingNoted", "ThingFlagged"]
    assert dispatch.action(it, set(), set(), {}).value == "apply"  # strict: both types handled
    dropped = item_of(_record(b""), decode_record(codec, codec.encode(legacy(None, None)), None))
    assert dropped.handled == () and dropped.env.event_type == "ThingUpdated"  # the guard still counts it
    plain = item_of(_record(b""), decode_record(codec, codec.encode(thing_event(
        "ThingNoted", {"note": "n", "kind": "A"}, version=5)), None))
    assert plain.events is None and plain.handled == (plain.env,)


def test_replay_applies_the_derived_events_of_one_message_as_one_aggregate_step(codec: EnvelopeCodec) -> None:
    handlers = HandlerRegistry()
    for t in ("ThingNoted", "ThingFlagged"):
        handlers.add(t, lambda ctx, e: None, kind=HandlerKind.PROJECTION)
    agg = "agg-1"
    first = codec.decode_message(codec.encode(legacy(aggregate_id=agg, aggregate_version=1))).events
    after = thing_event("ThingNoted", {"note": "n", "kind": "A"}, version=5, aggregate_id=agg, aggregate_version=2)
    items = [(("t", 0, 0), e) for e in first] + [(("t", 0, 1), after)]
    applier = ReplayApplier(consumer="r", handlers=handlers, first_seen=FirstSeenPolicy.STRICT)
    progress = Progress()
    planned = applier.decide(items, progress)
    assert [e.event_id for _hs, run in planned.runs for _p, e in run] == [e.event_id for _p, e in items]
    assert (progress.stale, progress.gaps, planned.changed) == (0, 0, {("thing", agg): 2})
    applier.commit(planned.changed)
    again = Progress()
    assert applier.decide(items, again).applied == 0 and again.stale == 2  # redelivered: stale as one step


def test_a_service_whose_chain_loops_fails_to_start_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from casestream.service.process import run_service

    catalog = load_catalog(thing_catalog(tmp_path, "unitloop"))
    chain = thing_upcasters()
    chain.add_event("ThingFlagged", 1, split_thing_updated, produces=[("ThingUpdated", 1)])

    def build() -> Any:
        EnvelopeCodec(catalog, InMemoryRegistry(), chain).prepare(auto_register=True)
        raise AssertionError("started despite the loop")

    with pytest.raises(SystemExit) as e:
        run_service(build)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("start-up failed: upcaster chain incomplete: upcaster loop")
