"""Tracing: the tracer provider, exporters, and W3C ``traceparent`` inject/extract helpers.

Driver module (opentelemetry-sdk). Trace context travels as a W3C Trace Context
``traceparent`` string (https://www.w3.org/TR/trace-context/, version ``00``): HTTP header in,
outbox column ``traceparent``, Kafka header ``traceparent``, envelope field ``traceparent``.

Span relationships in the suite (one trace per journey):

- HTTP request: SERVER span, child of an incoming ``traceparent`` header (else a new trace).
- outbox row: stores the traceparent of the span current while the row is written
  (:func:`traceparent_for_row`), so a follow-up event continues its cause's trace.
- relay: one PRODUCER span per row, **child** of the row's traceparent; the Kafka header
  carries the producer span's context. The relay's batch-level database work is not traced
  per row (a batch serves many traces).
- consumer, per-event handlers: one CONSUMER span per message, **child** of the header
  context (falling back to the envelope's ``traceparent``); follow-up outbox rows written by
  the handler are children of it.
- consumer, batch handlers (several events in one call, e.g. the audit projection): one
  ``process`` span for the run (a new trace) with a **link** to each message's context, and
  per message a short CONSUMER ``receive`` span, **child** of that message's context and
  linked to the batch span — so each journey's trace still shows the message being
  consumed, while the batch work lives in its own trace.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from casestream.errors import ConfigError

__all__ = [
    "FileSpanExporter",
    "build_tracer_provider",
    "context_from_traceparent",
    "current_traceparent",
    "span_context_of",
    "span_to_dict",
    "traceparent_of",
    "traceparent_for_row",
    "trace_id_of",
]

_PROPAGATOR = TraceContextTextMapPropagator()


def context_from_traceparent(traceparent: str | None) -> Context | None:
    """The remote parent context of a W3C ``traceparent`` string, or None if absent/invalid."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def span_context_of(traceparent: str | None) -> SpanContext | None:
    """The remote ``SpanContext`` of a ``traceparent`` (for span links), or None."""
    ctx = context_from_traceparent(traceparent)
    return trace.get_current_span(ctx).get_span_context() if ctx is not None else None


def traceparent_of(span: Span | SpanContext | None) -> str | None:
    """``00-<trace id 32 hex>-<span id 16 hex>-<flags 2 hex>`` of a span, None if not valid."""
    if span is None:
        return None
    sc = span if isinstance(span, SpanContext) else span.get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, or None when there is no valid one."""
    return traceparent_of(trace.get_current_span())


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id of a ``traceparent``, or None."""
    sc = span_context_of(traceparent)
    return f"{sc.trace_id:032x}" if sc is not None else None


def traceparent_for_row(event_traceparent: str | None) -> str | None:
    """The traceparent an outbox row should store for an event.

    The current span's, when there is one and it belongs to the same trace as the event's
    own ``traceparent`` (or the event has none); otherwise the event's (an event carrying a
    cause from another trace keeps it), so a journey stays one trace.
    """
    current = current_traceparent()
    if current is None:
        return event_traceparent
    if event_traceparent is None or trace_id_of(event_traceparent) == current[3:35]:
        return current
    return event_traceparent


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """A JSON-ready dict of a finished span (ids as lower-case hex, times in ns since epoch)."""
    sc = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{sc.trace_id:032x}",
        "span_id": f"{sc.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent is not None else None,
        "kind": span.kind.name,
        "service": (span.resource.attributes.get("service.name") if span.resource else None),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "links": [{"trace_id": f"{ln.context.trace_id:032x}",
                   "span_id": f"{ln.context.span_id:016x}"} for ln in span.links],
    }


class FileSpanExporter(SpanExporter):
    """Appends finished spans to a file as JSON lines (:func:`span_to_dict`), for local runs.

    Each span is one ``os.write`` of one line on an ``O_APPEND`` descriptor, so several
    processes may share the file without interleaving lines.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._fd < 0:
                return SpanExportResult.FAILURE
            for span in spans:
                os.write(self._fd, (json.dumps(span_to_dict(span), default=str) + "\n").encode())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def build_tracer_provider(service: str, exporters: Sequence[str], *, traces_file: str = "",
                          extra: Sequence[SpanExporter] = ()) -> TracerProvider:
    """A TracerProvider for ``service`` exporting to ``exporters`` (names, see settings).

    ``file`` and ``console`` use a simple (synchronous) processor so spans survive SIGTERM;
    ``otlp`` a batch processor. ``extra`` exporters (tests: in-memory) are added as simple.

    Raises:
        ConfigError: unknown exporter name, ``file`` without a path, ``otlp`` not installed.
    """
    # With nowhere to send spans, recording them only costs (~100 µs per span on the relay's
    # and consumer's per-message paths); non-recording spans still carry the trace id on.
    sampler = ALWAYS_OFF if not exporters and not extra else None  # None: OTEL_TRACES_SAMPLER
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "service.namespace": "casestream"}),
                              sampler=sampler)
    for name in exporters:
        if name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "file":
            if not traces_file:
                raise ConfigError("OTEL_TRACES_EXPORTER=file needs CASESTREAM_TELEMETRY_TRACES_FILE")
            provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(traces_file)))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as e:
                raise ConfigError("OTEL_TRACES_EXPORTER=otlp needs the package "
                                  "opentelemetry-exporter-otlp-proto-http") from e
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            raise ConfigError(f"unknown OTEL_TRACES_EXPORTER value {name!r} "
                              "(none, console, file, otlp)")
    for exporter in extra:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider

