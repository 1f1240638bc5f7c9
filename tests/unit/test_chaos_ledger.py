"""The chaos rig's pure parts: the fault timeline printed beside a violated check, the
addresses the services are given (the same endpoint through a proxy), and which targets a
fault holds so that two faults never hit one target at once."""

from __future__ import annotations

import random

import pytest

from casestream.testing.toxiproxy import upstream, via
from services import chaos
from services.soak import Check, Fault, Options


def _faults() -> list[Fault]:
    return [Fault(at_s=10.0, kind="pause", target="case#1", took_s=20.0, detail="SIGSTOP 20 s"),
            Fault(at_s=100.0, kind="cut-pg", target="pg proxy", took_s=5.0),
            Fault(at_s=400.0, kind="kill", target="audit#2", took_s=3.0)]


def test_the_timeline_beside_a_violation_holds_the_faults_around_it() -> None:
    lines = chaos.timeline(_faults(), [50.0])
    assert [line[22:].split()[0] for line in lines] == ["pause", "cut-pg"]
    assert lines[0].startswith("+  10.0 s .. +  30.0 s  pause")


def test_without_a_time_the_whole_timeline_is_printed() -> None:
    assert len(chaos.timeline(_faults(), [])) == 3


def test_the_report_prints_the_timeline_under_each_failed_check_only() -> None:
    report = chaos.Report(seed=1, faults=_faults(),
                          checks=[Check("a", True, "ok"), Check("b", False, "bad", [405.0])])
    text = report.lines()
    at = text.index("timeline beside FAIL b:")
    assert text[at + 1:] == ["  " + chaos.timeline(_faults(), [405.0])[0]]
    assert text[0].startswith("chaos: ") and "ambiguous-commit x0" in text[0]
    assert not any("beside FAIL a" in line for line in text)


def test_a_url_through_a_proxy_keeps_user_scheme_and_path() -> None:
    assert via("postgresql://postgres@127.0.0.1:15432", 17432) == "postgresql://postgres@127.0.0.1:17432"
    assert (via("http://localhost:18081/apis/ccompat/v7", 17081)
            == "http://127.0.0.1:17081/apis/ccompat/v7")
    assert upstream("http://localhost:18081/apis/ccompat/v7") == "localhost:18081"


def test_two_faults_never_hold_one_target() -> None:
    holds = chaos.Holds(random.Random(3), ["case#1", "case#2"])
    first, second = holds.instance(), holds.instance()
    assert {first, second} == {"case#1", "case#2"}
    holds.release(first)
    assert holds.instance() == first
    assert {holds.dependency(), holds.dependency(), holds.dependency()} == {"pg", "kafka", "registry"}
    assert holds.dependency() is None  # every proxy is held: the toxic is skipped
    assert holds.take("kafka (private)") and not holds.take("kafka (private)")


def test_every_fault_kind_has_its_method_and_weight() -> None:
    assert set(chaos._WEIGHTS) == set(chaos.FAULT_KINDS)
    for kind in chaos.FAULT_KINDS:
        assert callable(getattr(chaos.Injector, "_" + kind.replace("-", "_")))
    assert Options().fault_gap_s[0] > 0


def _rec(offset: int, eid: str, at: float = 0.0) -> chaos.Record:
    return ("outbox.event.case", 0, offset, "k1", eid, "T", at)


def test_a_second_record_is_named_in_order_or_stale_and_only_first_records_judge_order() -> None:
    order, once = chaos.once_and_in_order(
        [_rec(0, "a"), _rec(1, "a", 5.0), _rec(2, "b"), _rec(3, "a", 9.0)], {"a": 1, "b": 2}, {})
    assert order.ok, order.detail
    assert not once.ok and once.times == [5.0, 9.0]
    assert "re-published in order" in once.detail and "after a later version" in once.detail


def test_a_first_record_below_a_published_version_breaks_the_order() -> None:
    order, once = chaos.once_and_in_order([_rec(0, "b", 3.0), _rec(1, "a", 4.0)], {"a": 1, "b": 2}, {})
    assert once.ok and not order.ok and order.times == [4.0]


def test_poison_is_neither_a_duplicate_nor_out_of_order() -> None:
    order, once = chaos.once_and_in_order([_rec(0, "p"), _rec(1, "p")], {}, {"p": "t"})
    assert order.ok and once.ok
