"""A case's journey from raw records: its own events and those correlated with it, ordered,
with the causing event of each (pure; a fake decoder stands in for the codec)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from casestream.consumer import Record
from casestream.operations import journey_of

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def event(i: int, agg: str, agg_type: str, version: int, corr: str, cause: str | None) -> SimpleNamespace:
    return SimpleNamespace(event_id=f"e{i}", event_type=f"T{i}", event_version=1, aggregate_type=agg_type,
                           aggregate_id=agg, aggregate_version=version, tenant_id="t", source="svc",
                           occurred_at=T0 + timedelta(seconds=i), published_at=None, correlation_id=corr,
                           causation_id=cause, traceparent=None, actor_id="x",
                           payload={})


class Decoder:
    def __init__(self, events: dict[bytes, SimpleNamespace]) -> None:
        self.events = events

    def decode(self, value: bytes, **_: object) -> SimpleNamespace:
        if value not in self.events:
            raise ValueError("poison")
        return self.events[value]


def record(offset: int, key: str, value: bytes, corr: str) -> Record:
    return Record(topic="t", partition=0, offset=offset, key=key.encode(), value=value,
                  headers=(("correlation_id", corr.encode()),
                           ("traceparent", f"00-{'a' * 32}-{'b' * 16}-01".encode())))


def test_the_journey_has_the_case_and_its_correlated_events_in_order_with_causes() -> None:
    events = {b"1": event(1, "C1", "case", 1, "C1", None), b"2": event(2, "C1", "case", 2, "C1", "e1"),
              b"3": event(3, "S1", "saga", 1, "C1", "e2"), b"4": event(4, "C2", "case", 1, "C2", None)}
    records = [record(3, "S1", b"3", "C1"), record(0, "C1", b"1", "C1"), record(1, "C1", b"2", "C1"),
               record(2, "C2", b"4", "C2"), record(4, "C1", b"bad", "C1")]
    j = journey_of("C1", records, Decoder(events))
    assert [e.event_id for e in j.events] == ["e1", "e2", "e3"]  # C2's event is not in it
    assert [e.caused_by for e in j.events] == [None, 0, 1]
    assert j.events[0].trace_id == "a" * 32  # from the message header: the envelope has none
    assert j.undecodable == 1 and j.tenant == "t"
    assert j.decode_error == "t[0]@4: ValueError: poison"  # where and why, for the page to show


def test_a_journey_of_only_undecodable_messages_says_why() -> None:
    j = journey_of("C1", [record(7, "C1", b"bad", "C1")], Decoder({}))
    assert j.events == () and j.undecodable == 1 and j.decode_error == "t[0]@7: ValueError: poison"
