"""The process's telemetry: providers, ``install()``, and the hooks runtime modules call.

Driver module (opentelemetry-sdk). A process has one current :class:`Telemetry`; before
:func:`install` runs (unit tests, tools) it is a quiet default whose spans go nowhere, so
the hooks are always safe to call. Stats objects register in a process-wide
:class:`~casestream.telemetry.sources.Sources` that survives ``install()`` — runtimes are
built (and register) in a service's bootstrap before ``ServiceProcess.run`` installs.

Hooks (kept small so the runtime modules stay readable):

- relay: :func:`publish_span` per outbox row → ``.traceparent`` for the Kafka header,
  ``.end(err)`` from the delivery report; :func:`observe_relay` for ``RelayMetrics``.
- consumer: :func:`consumer_probe` (lag, in-flight, batch time, ``ConsumerStats``),
  :func:`consume_span` around one message's handlers, :func:`consume_batch_span` around a
  batch handler call (see ``tracing`` for child spans vs links).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from casestream.telemetry.logs import log_context, pop_log_context, push_log_context
from casestream.telemetry.metrics import HISTOGRAM_LABELS, MetricsRegistry
from casestream.telemetry.settings import TelemetrySettings
from casestream.telemetry.sources import ConsumerLag, Sources
from casestream.telemetry.tracing import (
    build_tracer_provider,
    context_from_traceparent,
    span_context_of,
    traceparent_of,
)

__all__ = ["Telemetry", "install", "current", "sources", "publish_span", "observe_relay",
           "consumer_probe", "consume_span", "consume_batch_span", "ConsumerProbe", "PublishSpan",
           "db_span", "observe_query"]

log = logging.getLogger("casestream.telemetry")

_SOURCES = Sources()


@dataclass(slots=True)
class Telemetry:
    """Tracer provider + metrics registry of one process (service name ``service``)."""

    service: str
    tracer_provider: TracerProvider
    metrics: MetricsRegistry
    recording: bool = True
    """Spans go somewhere (an exporter is configured). When False the per-message hooks
    skip span creation — even a non-recording span costs ~25 µs — and pass the message's
    own ``traceparent`` on unchanged, so traces still join up downstream."""
    tracer: trace.Tracer = field(init=False)
    """The casestream tracer, made once: ``get_tracer`` builds a new Tracer (and its
    instrumentation scope) on every call, about 80 µs — too much per message."""
    _observers: dict[tuple[str, tuple[str, ...]], Callable[[float], None]] = field(
        init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.tracer = self.tracer_provider.get_tracer("casestream")

    def observe(self, histogram: str, seconds: float, *labels: str) -> None:
        """Record ``seconds`` in ``histogram`` with label values ``labels`` in the order of
        ``metrics.HISTOGRAM_LABELS[histogram]``; the bound child is cached per label set."""
        key = (histogram, labels)
        observe = self._observers.get(key)
        if observe is None:
            names = HISTOGRAM_LABELS[histogram]
            observe = self.metrics.observer(histogram, **dict(zip(names, labels, strict=True)))
            self._observers[key] = observe
        observe(seconds if seconds > 0.0 else 0.0)

    def shutdown(self) -> None:
        """Flush and stop exporters (called when the service stops)."""
        self.tracer_provider.shutdown()
        self.metrics.shutdown()


def _default() -> Telemetry:
    return Telemetry("casestream", build_tracer_provider("casestream", []),
                     MetricsRegistry("casestream", _SOURCES), recording=False)


_current: Telemetry | None = None


def current() -> Telemetry:
    """The installed telemetry, or a quiet default (no exporters) if none was installed."""
    global _current
    if _current is None:
        _current = _default()
    return _current


def sources() -> Sources:
    """The process-wide registry of stats objects."""
    return _SOURCES


def install(service: str, settings: TelemetrySettings | None = None, *,
            extra_exporters: Sequence[SpanExporter] = ()) -> Telemetry:
    """Build this process's telemetry for ``service`` and make it current.

    Exporters from ``settings`` (default: read from the environment); ``extra_exporters``
    (tests) are added. Also sets the OpenTelemetry global tracer provider the first time, so
    third-party instrumentation joins the same traces.

    Raises:
        casestream.errors.ConfigError: bad exporter configuration.
    """
    global _current
    settings = settings or TelemetrySettings()
    name = settings.service_name or service
    provider = build_tracer_provider(name, settings.exporters(),
                                     traces_file=settings.traces_file, extra=extra_exporters)
    recording = bool(settings.exporters()) or bool(extra_exporters)
    _current = Telemetry(name, provider, MetricsRegistry(name, _SOURCES), recording)
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)
    return _current


# ---------------------------------------------------------------------- relay


@dataclass(slots=True)
class PublishSpan:
    """A PRODUCER span for one outbox row; ``traceparent`` goes into the Kafka header.

    ``span`` is None when tracing is off (:attr:`Telemetry.recording`): then only the publish
    time is recorded and ``traceparent`` is the row's own."""

    span: Span | None
    tel: Telemetry
    relay: str
    topic: str
    started: float
    fallback: str | None

    @property
    def traceparent(self) -> str | None:
        """The producer span's traceparent, else the row's own."""
        if self.span is None:
            return self.fallback
        return traceparent_of(self.span) or self.fallback

    def end(self, error: object | None = None) -> None:
        """End the span (delivery report or produce error ``error``) and record its time
        in ``relay_publish_duration_seconds`` (seconds from produce call to report)."""
        if self.span is not None:
            if error is not None:
                self.span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
            self.span.end()
        self.tel.observe("relay_publish_duration_seconds", time.monotonic() - self.started,
                         self.relay, self.topic)


def publish_span(relay: str, topic: str, row: Any) -> PublishSpan:
    """Start the PRODUCER span ``<topic> publish`` of outbox ``row`` (child of its traceparent).

    ``row`` has ``id``, ``type``, ``aggregatetype``, ``aggregateid``, ``traceparent``,
    ``correlation_id`` (``casestream.outbox.relay.store.OutboxRow``). With tracing off no span is
    made (see :class:`PublishSpan`).
    """
    tel = current()
    if not tel.recording:
        return PublishSpan(None, tel, relay, topic, time.monotonic(), row.traceparent)
    parent = context_from_traceparent(row.traceparent)
    span = tel.tracer.start_span(
        f"{topic} publish", context=parent, kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "kafka", "messaging.destination.name": topic,
                    "messaging.operation.type": "send", "messaging.operation.name": "publish",
                    "messaging.message.id": str(row.id), "casestream.event_type": row.type,
                    "casestream.relay": relay, "service.component": "relay"})
    return PublishSpan(span, tel, relay, topic, time.monotonic(), row.traceparent)


def observe_relay(name: str, metrics: Any) -> None:
    """Export relay ``name``'s ``RelayMetrics`` (counters and outbox gauges) at scrape time."""
    _SOURCES.add_relay(name, metrics)


# ---------------------------------------------------------------------- consumer


class ConsumerProbe:
    """Lag, in-flight and batch-time probe of one consumer runtime.

    The runtime calls :meth:`polled` after each poll (with the records it got, maybe none),
    :meth:`started` when it hands a batch to the database thread and :meth:`finished` when
    that batch has landed (committed or failed).
    """

    def __init__(self, name: str, lag: ConsumerLag) -> None:
        self.name = name
        self.lag = lag
        self._started = 0.0
        self._from_group = False

    def polled(self, records: Sequence[Any], kafka_consumer: Any = None) -> None:
        """Update lag from ``records`` (``Record``: topic, partition, offset, timestamp_ms).

        queue_lag_seconds per topic = now - the Kafka timestamp of the batch's last record,
        the largest over partitions (0 when the poll came back empty: caught up);
        queue_lag_messages = sum over partitions of (cached high watermark - offset - 1)
        until :meth:`group_lag` has read the group's committed offsets, which then rule.
        """
        if not records:
            for topic in list(self.lag.seconds):
                self.lag.seconds[topic] = 0.0
            return
        now_ms = time.time() * 1000.0
        last: dict[tuple[str, int], Any] = {}
        for r in records:
            last[(r.topic, r.partition)] = r
        secs: dict[str, float] = {}
        msgs: dict[str, float] = {}
        for (topic, partition), r in last.items():
            if r.timestamp_ms is not None and r.timestamp_ms > 0:
                age = max(0.0, (now_ms - r.timestamp_ms) / 1000.0)
                secs[topic] = max(secs.get(topic, 0.0), age)
            msgs[topic] = msgs.get(topic, 0.0) + _behind(kafka_consumer, topic, partition, r.offset)
        self.lag.seconds.update(secs)
        if not self._from_group:
            self.lag.messages.update(msgs)

    def group_lag(self, messages: dict[str, float]) -> None:
        """queue_lag_messages per topic from Kafka: high watermark - the group's committed
        offset (none: the first retained offset), summed over this member's partitions. What
        was fetched but not committed is still behind: a batch stuck before its first commit
        keeps the whole waiting log as lag."""
        self._from_group = True
        self.lag.messages.update(messages)

    def started(self, count: int) -> None:
        """A batch of ``count`` messages went to the database thread."""
        self.lag.inflight = count
        self._started = time.monotonic()

    def finished(self) -> None:
        """The batch in flight landed: nothing in flight; record its duration."""
        if self._started:
            current().observe("consumer_batch_duration_seconds",
                              time.monotonic() - self._started, self.name)
        self._started = 0.0
        self.lag.inflight = 0


def _behind(kafka_consumer: Any, topic: str, partition: int, offset: int) -> float:
    if kafka_consumer is None:
        return 0.0
    try:
        # lazy (start-up cost): confluent_kafka only when consumer lag is probed
        from confluent_kafka import TopicPartition

        _, high = kafka_consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       cached=True)
    except Exception:  # noqa: BLE001 - lag is best effort
        return 0.0
    return float(max(0, high - offset - 1)) if high >= 0 else 0.0


def consumer_probe(name: str, stats: Any) -> ConsumerProbe:
    """Register consumer ``name``'s ``ConsumerStats`` and return its probe."""
    return ConsumerProbe(name, _SOURCES.add_consumer(name, stats))


def _message_attributes(consumer: str, rec: Any, env: Any, operation: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": "kafka", "messaging.destination.name": rec.topic,
        "messaging.consumer.group.name": consumer, "messaging.operation.type": operation,
        "messaging.destination.partition.id": str(rec.partition),
        "messaging.kafka.offset": rec.offset, "service.component": "consumer"}
    if env is not None:
        attrs["messaging.message.id"] = str(env.event_id)
        attrs["casestream.event_type"] = env.event_type
        attrs["messaging.message.conversation_id"] = str(env.correlation_id)
    return attrs


def _parent_traceparent(rec: Any, env: Any) -> str | None:
    return rec.header("traceparent") or (getattr(env, "traceparent", None) if env else None)


def _attach_message_context(traceparent: str | None) -> object | None:
    """Make the message's own span context current (a non-recording span), so rows written
    by its handler continue its trace with no exporter configured; the token for ``detach``,
    None when the message carries no valid ``traceparent``."""
    ctx = context_from_traceparent(traceparent)
    return otel_context.attach(ctx) if ctx is not None else None


def consume_span(consumer: str, rec: Any, env: Any) -> Any:
    """Context manager: CONSUMER span ``<topic> process`` around one message's handlers,
    child of the message's trace context (header ``traceparent``, else the envelope's); sets
    the log context (consumer, event_id, correlation_id, aggregate_id) and records the handler
    time (``consumer_message_duration_seconds``). Exceptions are recorded on the span and
    re-raised. It enters as the span (``INVALID_SPAN`` when :attr:`Telemetry.recording` is
    off)."""
    tel = current()
    if not tel.recording:
        return _QuietConsume(tel, consumer, rec, env)
    return _recorded_consume_span(tel, consumer, rec, env)


class _QuietConsume:
    """:func:`consume_span` without tracing: the log context and the handler time only.

    A class, not a generator context manager: it runs once per message, and with no span to
    make the generator machinery and the nested ``log_context`` were most of its cost
    (about 10 -> 3 µs per message)."""

    __slots__ = ("_tel", "_consumer", "_rec", "_env", "_token", "_started", "_trace_token")

    def __init__(self, tel: Telemetry, consumer: str, rec: Any, env: Any) -> None:
        self._tel, self._consumer, self._rec, self._env = tel, consumer, rec, env

    def __enter__(self) -> Span:
        env = self._env
        self._token = push_log_context({
            "consumer": self._consumer, "event_id": getattr(env, "event_id", None),
            "correlation_id": getattr(env, "correlation_id", None),
            "aggregate_id": getattr(env, "aggregate_id", None)})
        self._trace_token = _attach_message_context(_parent_traceparent(self._rec, env))
        self._started = time.monotonic()
        return trace.INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        try:
            if self._trace_token is not None:
                otel_context.detach(self._trace_token)
            pop_log_context(self._token)
        finally:
            self._tel.observe("consumer_message_duration_seconds",
                              time.monotonic() - self._started, self._consumer, self._rec.topic)


@contextmanager
def _recorded_consume_span(tel: Telemetry, consumer: str, rec: Any, env: Any) -> Iterator[Span]:
    started = time.monotonic()
    with log_context(consumer=consumer, event_id=getattr(env, "event_id", None),
                     correlation_id=getattr(env, "correlation_id", None),
                     aggregate_id=getattr(env, "aggregate_id", None)):
        try:
            parent = context_from_traceparent(_parent_traceparent(rec, env))
            with tel.tracer.start_as_current_span(
                    f"{rec.topic} process", context=parent, kind=SpanKind.CONSUMER,
                    attributes=_message_attributes(consumer, rec, env, "process")) as span:
                yield span
        finally:
            tel.observe("consumer_message_duration_seconds", time.monotonic() - started,
                        consumer, rec.topic)


@contextmanager
def consume_batch_span(consumer: str, items: Sequence[tuple[Any, Any]]) -> Iterator[Span]:
    """Span ``<consumer> process batch`` around one batch-handler call over ``items``
    ((Record, Envelope) pairs): a new trace, linked to every message's context; plus one
    short CONSUMER ``<topic> receive`` span per message, child of the message's context and
    linked to the batch span. With a single item the batch span is that message's child."""
    tel = current()
    first = items[0][0]
    if not tel.recording:
        started = time.monotonic()
        # a batch of one continues its message's trace (as the recorded path's child span does)
        token = _attach_message_context(_parent_traceparent(*items[0])) if len(items) == 1 else None
        with log_context(consumer=consumer):
            try:
                yield trace.INVALID_SPAN
            finally:
                if token is not None:
                    otel_context.detach(token)
                tel.observe("consumer_message_duration_seconds", time.monotonic() - started,
                            consumer, first.topic)
        return
    tps = [_parent_traceparent(rec, env) for rec, env in items]
    links = [Link(sc) for sc in (span_context_of(tp) for tp in tps) if sc is not None]
    parent = context_from_traceparent(tps[0]) if len(items) == 1 else None
    attributes: dict[str, Any] = {
        "messaging.system": "kafka", "messaging.destination.name": first.topic,
        "messaging.consumer.group.name": consumer, "messaging.operation.type": "process",
        "messaging.batch.message_count": len(items), "service.component": "consumer"}
    if len(items) == 1:
        # a batch of one is that message's span: it names the message as the per-event span does
        attributes.update(_message_attributes(consumer, *items[0], "process"))
    started = time.monotonic()
    with tel.tracer.start_as_current_span(
            f"{first.topic} process batch", context=parent, kind=SpanKind.CONSUMER,
            links=[] if parent is not None else links, attributes=attributes) as batch, \
            log_context(consumer=consumer):
        if parent is None:
            batch_link = [Link(batch.get_span_context())]
            for (rec, env), tp in zip(items, tps, strict=True):
                ctx = context_from_traceparent(tp)
                if ctx is None:
                    continue
                tel.tracer.start_span(f"{rec.topic} receive", context=ctx, kind=SpanKind.CONSUMER,
                                      links=batch_link,
                                      attributes=_message_attributes(consumer, rec, env, "receive")
                                      ).end()
        try:
            yield batch
        finally:
            tel.observe("consumer_message_duration_seconds", time.monotonic() - started,
                        consumer, first.topic)


@contextmanager
def db_span(name: str, *, operation: str, collection: str | None = None,
            namespace: str | None = None) -> Iterator[Span]:
    """CLIENT span for a PostgreSQL operation (``db.system`` = ``postgresql``)."""
    attrs: dict[str, Any] = {"db.system": "postgresql", "db.system.name": "postgresql",
                             "db.operation.name": operation}
    if collection:
        attrs["db.collection.name"] = collection
    if namespace:
        attrs["db.namespace"] = namespace
    with current().tracer.start_as_current_span(name, kind=SpanKind.CLIENT,
                                                attributes=attrs) as span:
        yield span


def observe_query(pool: Any, metric: str, query: str, *, timeout_s: float = 2.0) -> None:
    """Serve ``metric`` from a SQL query run at scrape time on ``pool`` (psycopg pool).

    The query's last column is the value, every other column a label named after it
    (keep them bounded: states, kinds — never ids). E.g. ``SELECT state, count(*) FROM saga
    GROUP BY state`` → ``saga_state_total{state="..."}``. A failing query yields no samples.
    """

    def read() -> dict[tuple[tuple[str, str], ...], float]:
        with pool.connection(timeout=timeout_s) as conn:
            cur = conn.execute(query)
            names = [c.name for c in cur.description]
            return {tuple(zip(names[:-1], map(str, row[:-1]), strict=True)): float(row[-1])
                    for row in cur.fetchall()}

    _SOURCES.add_gauge(metric, read)
