"""Open / resolved / discarded / superseded entries of a dead-letter topic (pure rule)."""

from __future__ import annotations

import pytest

from casestream.consumer import Record
from casestream.operations import OperatorAction, ActionLogError, dead_letter_state


def dl(offset: int, origin_offset: int, redrives: int = 0, ts: int = 0) -> Record:
    return Record(topic="c.dlq", partition=0, offset=offset, key=b"k", value=b"v", timestamp_ms=ts or offset,
                  headers=(("id", f"e{origin_offset}".encode()), ("dlq.original.topic", b"t"),
                           ("dlq.original.partition", b"0"),
                           ("dlq.original.offset", str(origin_offset).encode()),
                           ("dlq.redrive.count", str(redrives).encode())))


def copy(of: Record, offset: int) -> Record:
    return Record(topic="c.redrive", partition=0, offset=offset, key=of.key, value=of.value,
                  headers=of.headers + (("dlq.redriven.at", b"2026-01-01T00:00:00Z"),))


def states(dlq, redrive=(), committed=None, discards=()):
    return [e.state for e in dead_letter_state("c", dlq, redrive, committed or {}, discards).entries]


def test_a_dead_letter_is_open_until_a_redriven_copy_is_consumed() -> None:
    a = dl(0, 10)
    assert states([a]) == ["open"]
    assert states([a], [copy(a, 0)], {0: None}) == ["redriving"]
    assert states([a], [copy(a, 0)], {0: 1}) == ["resolved"]


def test_a_copy_failing_again_supersedes_the_first_entry_and_the_second_is_open() -> None:
    a = dl(0, 10)
    again = dl(1, 10, redrives=1)
    state = dead_letter_state("c", [a, again], [copy(a, 0)], {0: 1})
    assert [e.state for e in state.entries] == ["superseded", "open"]
    assert state.depth == 1
    # re-driving the second entry and consuming it resolves the message
    assert states([a, again], [copy(a, 0), copy(again, 1)], {0: 2}) == ["superseded", "resolved"]


def test_discarded_entries_are_not_open_and_other_messages_stay_open() -> None:
    a, b = dl(0, 10), dl(1, 11)
    state = dead_letter_state("c", [a, b], [], {}, {"0:0"})
    assert [e.state for e in state.entries] == ["discarded", "open"]
    assert [e.label for e in state.open] == ["0:1"]


def test_an_action_needs_a_reason_and_an_actor() -> None:
    with pytest.raises(ActionLogError, match="reason"):
        OperatorAction(actor="alice", action="dlq.discard", target="c", reason="  ")
    with pytest.raises(ActionLogError, match="actor"):
        OperatorAction(actor="", action="dlq.discard", target="c", reason="why")
    a = OperatorAction(actor="alice", action="dlq.discard", target="c", reason="dup", items=("0:1",))
    assert OperatorAction.from_json(a.to_json()) == a


@pytest.mark.parametrize("reason", ["first line\nsecond line", "a\r\nb\tc", "bell\x07 and nul\x00",
                                    "trailing newline\n", "<b>&amp;</b> \u2028"])
def test_a_reason_is_recorded_verbatim_on_one_line(reason: str) -> None:
    a = OperatorAction(actor="alice", action="saga.resolve", target="s-1", reason=reason)
    raw = a.to_json()
    assert b"\n" not in raw and b"\r" not in raw  # one record, escaped: never split
    assert OperatorAction.from_json(raw).reason == reason
