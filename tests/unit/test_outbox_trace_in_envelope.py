"""The event body carries the journey's trace too: an outbox writer appending inside a handler
(no exporter configured) encodes the envelope with the message's trace, so a consumer reading
the body alone (the audit journal) sees the same trace id as the Kafka header."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from casestream import telemetry
from casestream.consumer.records import Record
from casestream.events.envelope import new_event
from casestream.outbox.writer import OutboxWriter
from casestream.telemetry.settings import TelemetrySettings
from casestream.telemetry.tracing import trace_id_of

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Capturing:
    """An encoder that remembers the envelopes it was given."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def encode(self, env: Any) -> bytes:
        self.seen.append(env)
        return b"x"


def _event(traceparent: str | None = None) -> Any:
    return new_event(event_type="DecisionRequested", aggregate_type="saga", aggregate_id="s-1",
                     aggregate_version=1, payload={}, tenant_id="t1", correlation_id="c-1",
                     actor_id="saga", source="saga", traceparent=traceparent)


def test_an_event_written_in_a_handler_carries_the_messages_trace_in_its_body() -> None:
    telemetry.install("unit", TelemetrySettings(OTEL_TRACES_EXPORTER="none"))
    codec = Capturing()
    writer = OutboxWriter(codec)
    rec = Record(topic="outbox.event.case", partition=0, offset=1, key=b"k", value=b"v",
                 headers=(("traceparent", TP.encode()),), timestamp_ms=1)
    with telemetry.consume_span("saga.orchestrator", rec, SimpleNamespace(event_id="e1")):
        row = writer._row(_event())
    assert trace_id_of(codec.seen[0].traceparent) == trace_id_of(TP)
    assert trace_id_of(row[9]) == trace_id_of(TP)  # the row's (Kafka header's) trace: the same
    # outside any trace the envelope is written as given
    writer._row(_event())
    assert codec.seen[1].traceparent is None
