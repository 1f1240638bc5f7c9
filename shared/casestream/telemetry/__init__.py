"""Observability for casestream: traces, metrics, JSON logs.

- :mod:`~casestream.telemetry.tracing`: tracer provider from ``OTEL_*`` settings, file /
  console / OTLP exporters, W3C ``traceparent`` helpers, and the child-span-vs-link rules;
- :mod:`~casestream.telemetry.metrics`: the instruments and Prometheus text exposition;
- :mod:`~casestream.telemetry.sources`: stats objects read at scrape time;
- :mod:`~casestream.telemetry.core`: ``install()``/``current()`` and runtime hooks;
- :mod:`~casestream.telemetry.http`: tracing middleware and the ``/metrics`` route;
- :mod:`~casestream.telemetry.logs`: JSON log formatter and log context;
- :mod:`~casestream.telemetry.readiness`: database / Kafka / registry readiness checks (re-exported lazily: it imports httpx).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

from casestream.telemetry.core import (
    ConsumerProbe,
    PublishSpan,
    Telemetry,
    consume_batch_span,
    consume_span,
    consumer_probe,
    current,
    db_span,
    install,
    observe_query,
    observe_relay,
    publish_span,
    sources,
)
from casestream.telemetry.logs import JsonFormatter, log_context, redact
from casestream.telemetry.metrics import render_prometheus
from casestream.telemetry.settings import TelemetrySettings
from casestream.telemetry.tracing import (
    context_from_traceparent,
    current_traceparent,
    traceparent_for_row,
    traceparent_of,
)

if TYPE_CHECKING:
    from casestream.telemetry.readiness import DependencyDown, dependency_checks, kafka_check, registry_check

_LAZY = {name: "casestream.telemetry.readiness"
         for name in ("DependencyDown", "dependency_checks", "kafka_check", "registry_check")}

__all__ = [
    "DependencyDown", "dependency_checks", "kafka_check", "registry_check",
    "ConsumerProbe", "JsonFormatter", "PublishSpan", "Telemetry", "TelemetrySettings",
    "consume_batch_span", "consume_span", "consumer_probe", "context_from_traceparent",
    "current", "current_traceparent", "db_span", "install", "log_context", "observe_query", "observe_relay",
    "publish_span", "redact", "render_prometheus", "sources", "traceparent_for_row",
    "traceparent_of",
]


__getattr__ = lazy_exports(__name__, _LAZY, globals())
