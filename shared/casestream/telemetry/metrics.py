"""Metrics: the OpenTelemetry meter provider, the suite's instruments, Prometheus exposition.

Driver module (opentelemetry-sdk metrics, opentelemetry-exporter-prometheus,
prometheus-client). One :class:`MetricsRegistry` per process: an SDK ``MeterProvider`` whose
``PrometheusMetricReader`` feeds a ``prometheus_client.CollectorRegistry`` of its own (pull:
the SDK collects, running the observable callbacks, when that registry is scraped), and
``/metrics`` is ``prometheus_client.generate_latest`` of it — the Prometheus text exposition
format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/). Nothing is
rendered by hand. Only metrics with at least one sample are exposed (the exporter's rule): a
family whose source is not registered in this process (e.g. ``saga_state_total`` outside the
saga service) is absent, not zero.

Names in :data:`METRIC_HELP` are the final Prometheus names, and the exporter keeps them as
they are: counters already end in ``_total`` (prometheus-client strips and re-adds it);
instruments named ``*_seconds`` carry the unit ``s``, which maps to the suffix ``_seconds``
they already have; gauges named ``*_total`` (outbox_pending_total, saga_state_total) are
exported unchanged. The reader runs without scope labels (``otel_scope_*``) and without
``target_info``, so each sample carries exactly the labels below. Labels are bounded:
consumer, relay, topic, reason, state, outcome, method, status class — never ids.

Histograms are ``prometheus_client.Histogram`` children in the same registry, not SDK
instruments: an SDK ``Histogram.record`` hashes its attribute dict on every call (~20 µs),
which cost the relay and the consumer a third of their per-message budget; a bound
``prometheus_client`` child observes in ~2 µs. They render in the same exposition (label
order: sorted, as the exporter's). Unlike the SDK families, a histogram family is declared
(``# HELP``/``# TYPE``) before its first sample.

Observed from existing stats (``Sources``) at scrape time:
    retry_attempts_total{consumer}, dead_letter_total{consumer},
    dead_letter_reason_total{consumer,reason}, consumer_messages_total{consumer,outcome},
    consumer_batches_total{consumer}, queue_lag_seconds{consumer,topic},
    queue_lag_messages{consumer,topic}, queue_messages_inflight{consumer},
    consumer_partitions_assigned{consumer}, consumer_stalls_total{consumer},
    consumer_client_restarts_total{consumer}, relay_shards_held{relay},
    relay_published_total{relay}, relay_delivery_errors_total{relay}, relay_retried_total{relay},
    relay_failed_total{relay}, relay_gave_up_total{relay}, relay_size_rejections_total{relay},
    relay_batches_total{relay}, outbox_pending_total{relay},
    outbox_failed_total{relay}, outbox_oldest_pending_age_seconds{relay},
    postgres_xmin_horizon_age_seconds{relay},
    inbox_purged_total{consumer}, guard_compacted_total{consumer},
    inbox_retention_cutoff_age_seconds{consumer} (casestream.consumer.retention),
    dead_letter_open{consumer} (casestream.operations.depth, from the topics),
    dead_letter_group_open{consumer,failure_class,fingerprint} (likewise, per failure group),
    idempotency_replays_total, idempotency_conflicts_total, http_shed_total,
    http_rate_limited_total, http_unauthorized_total, http_body_timeouts_total,
    http_client_disconnects_total, http_internal_errors_total,
    saga_state_total{state}, saga_stuck_total, compensation_total, timeouts_total{component}
    (the last four from SQL registered by the saga service: ``core.observe_query``)
Process and build (prometheus_client collectors): :data:`PROCESS_METRICS`, :data:`BUILD_INFO`.
Recorded by hooks (histograms, seconds):
    consumer_message_duration_seconds{consumer,topic}, consumer_batch_duration_seconds{consumer},
    relay_publish_duration_seconds{relay,topic}, http_server_duration_seconds{method,status}
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from casestream.telemetry.sources import Sources

__all__ = ["MetricsRegistry", "render_prometheus", "CONTENT_TYPE", "METRIC_HELP", "HISTOGRAM_LABELS",
           "PROCESS_METRICS", "BUILD_INFO", "build_info"]

# Process-wide switch of prometheus_client: no ``<histogram>_created`` gauge per label set (the
# OpenTelemetry exporter never emitted one; it only adds series nobody queries).
disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""``text/plain; version=0.0.4; charset=utf-8``: the format ``generate_latest`` writes."""

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

METRIC_HELP: dict[str, tuple[str, str]] = {
    # name: (prometheus type, help)
    "retry_attempts_total": ("counter", "Retryable handler failures (one per attempt)."),
    "timeouts_total": ("counter", "Deadlines that passed (saga step deadlines fired)."),
    "idempotency_replays_total": ("counter", "Stored idempotent responses sent again."),
    "idempotency_conflicts_total": ("counter", "Idempotency-Key reused for a different request."),
    "queue_lag_seconds": ("gauge", "Age of the last consumed message when polled, seconds."),
    "queue_lag_messages": ("gauge", "Messages behind the partition high watermark."),
    "queue_messages_inflight": ("gauge", "Messages in the batch being processed."),
    "dead_letter_total": ("counter", "Messages written to the dead-letter topic."),
    "dead_letter_reason_total": ("counter", "Dead letters by reason."),
    "dead_letter_open": ("gauge", "Open dead letters on the consumer's dead-letter topic (not re-driven "
                                  "successfully nor discarded), read from the topics."),
    "dead_letter_group_open": ("gauge", "Open dead letters of one failure group (consumer, failure "
                               "class, fingerprint), as casestream dlq groups shows them."),
    "consumer_messages_total": ("counter", "Consumed messages by outcome."),
    "consumer_batches_total": ("counter", "Poll batches applied."),
    "consumer_partitions_assigned": ("gauge", "Partitions assigned to this consumer member now."),
    "consumer_stalls_total": ("counter", "Times the consumer loop stayed in one step past stall_after_s."),
    "consumer_client_restarts_total": ("counter", "Kafka consumers replaced after no assignment "
                                                  "within rejoin_timeout_s."),
    "outbox_pending_total": ("gauge", "Pending outbox rows (whole table)."),
    "outbox_failed_total": ("gauge", "Outbox rows marked failed."),
    "outbox_oldest_pending_age_seconds": ("gauge", "Age of the oldest pending outbox row."),
    "postgres_xmin_horizon_age_seconds": ("gauge", "Age of the oldest transaction holding the "
                                          "outbox database's vacuum horizon (xmin) back."),
    "outbox_cdc_lag_bytes": ("gauge", "WAL bytes written since the CDC replication slot's confirmed LSN."),
    "outbox_cdc_slot_safe_wal_bytes": ("gauge", "WAL bytes that may still be written before "
                                       "max_slot_wal_keep_size invalidates the CDC slot."),
    "outbox_cdc_unconfirmed_total": ("gauge", "Outbox rows CDC has not confirmed published yet."),
    "outbox_cdc_oldest_unconfirmed_age_seconds": ("gauge", "Age of the oldest outbox row CDC has not confirmed."),
    "outbox_cdc_deleted_total": ("counter", "Outbox rows deleted after CDC passed them."),
    "relay_published_total": ("counter", "Outbox rows published (delivery confirmed)."),
    "relay_delivery_errors_total": ("counter", "Failed delivery reports or produce errors."),
    "relay_retried_total": ("counter", "Outbox rows rescheduled with backoff."),
    "relay_failed_total": ("counter", "Outbox rows marked failed."),
    "relay_gave_up_total": ("counter", "Outbox rows failed after max_attempts retryable errors (alert)."),
    "relay_size_rejections_total": ("counter", "Record batches the broker refused as too large."),
    "relay_batches_total": ("counter", "Relay batches."),
    "relay_shards_held": ("gauge", "Outbox shards this relay instance holds a lease on."),
    "inbox_purged_total": ("counter", "Inbox rows purged by the retention job."),
    "guard_compacted_total": ("counter", "Version-guard rows compacted by the retention job."),
    "inbox_retention_cutoff_age_seconds": ("gauge", "Age of the last inbox purge cutoff (0: none allowed)."),
    "saga_state_total": ("gauge", "Sagas by current state."),
    "saga_stuck_total": ("gauge", "Sagas with no progress past their deadline plus grace."),
    "compensation_total": ("counter", "Sagas that entered compensation."),
    "http_shed_total": ("counter", "503 answers from load shedding."),
    "http_rate_limited_total": ("counter", "429 answers from rate limiting."),
    "http_unauthorized_total": ("counter", "401 answers."),
    "http_body_timeouts_total": ("counter", "408 answers: a request body did not arrive in time."),
    "http_client_disconnects_total": ("counter", "Clients gone before their answer (not errors)."),
    "http_internal_errors_total": ("counter", "500 answers from the error boundary."),
    "consumer_message_duration_seconds": ("histogram", "Handler time per message."),
    "consumer_batch_duration_seconds": ("histogram", "Time to apply one poll batch."),
    "relay_publish_duration_seconds": ("histogram", "Produce call to delivery report."),
    "http_server_duration_seconds": ("histogram", "HTTP request duration."),
}

HISTOGRAM_LABELS: dict[str, tuple[str, ...]] = {
    "consumer_message_duration_seconds": ("consumer", "topic"),
    "consumer_batch_duration_seconds": ("consumer",),
    "relay_publish_duration_seconds": ("relay", "topic"),
    "http_server_duration_seconds": ("method", "status"),
}
"""Label names of each histogram, in exposition order."""

_CONSUMER_OUTCOMES = ("applied", "duplicates", "reused_ids", "stale", "unknown_type", "held", "drained", "parked")
_RELAY_COUNTERS = {"relay_published_total": "published_total",
                   "relay_delivery_errors_total": "delivery_errors_total",
                   "relay_retried_total": "retried_total", "relay_failed_total": "failed_total",
                   "relay_gave_up_total": "gave_up_total",
                   "relay_size_rejections_total": "size_rejections_total",
                   "relay_batches_total": "batches_total"}
_RELAY_GAUGES = ("outbox_pending_total", "outbox_failed_total",
                 "outbox_oldest_pending_age_seconds", "postgres_xmin_horizon_age_seconds")
_APP_COUNTERS = {"idempotency_replays_total": ("idempotency_replays",),
                 "idempotency_conflicts_total": ("idempotency_conflicts",),
                 "http_shed_total": ("edge", "shed"),
                 "http_rate_limited_total": ("edge", "rate_limited"),
                 "http_unauthorized_total": ("edge", "unauthorized"),
                 "http_body_timeouts_total": ("edge", "body_timeouts"),
                 "http_client_disconnects_total": ("edge", "client_disconnects"),
                 "http_internal_errors_total": ("edge", "internal_errors")}
"""Metric -> attribute path in an app's counters object; the ``edge`` step is skipped when
the object is the edge's ``EdgeCounters`` itself (an app without counters of its own)."""


PROCESS_METRICS = ("process_cpu_seconds_total", "process_resident_memory_bytes",
                   "process_virtual_memory_bytes", "process_start_time_seconds",
                   "process_open_fds", "process_max_fds")
"""prometheus_client's process collector (Linux /proc), on every service's ``/metrics``."""
BUILD_INFO = "casestream_build_info"
"""``casestream_build_info{service,version,python} 1``."""


def build_info(service: str) -> dict[str, str]:
    """The labels of :data:`BUILD_INFO`."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("casestream")
    except PackageNotFoundError:
        ours = "unknown"
    return {"service": service, "version": ours, "python": platform.python_version()}


class MetricsRegistry:
    """The process's meter provider and instruments, reading ``sources`` at collection.

    Attributes:
        registry: this instance's ``prometheus_client.CollectorRegistry`` (never the global
            ``REGISTRY``, so several instances can live in one process, e.g. in tests).
        reader: the ``PrometheusMetricReader`` registered in ``registry``; unregistered by
            :meth:`shutdown`.
        sources: registered stats objects (shared with the hooks).
    """

    def __init__(self, service: str, sources: Sources) -> None:
        self.sources = sources
        self.registry = CollectorRegistry(auto_describe=False)
        self.reader = PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False,
                                             registry=self.registry)
        self._scrape = threading.Lock()
        self.provider = MeterProvider(metric_readers=[self.reader],
                                      resource=Resource.create({"service.name": service}))
        meter = self.provider.get_meter("casestream")
        self._histograms: dict[str, Histogram] = {}
        # process_* (CPU, memory, file descriptors, start time) and casestream_build_info:
        # prometheus_client collectors of the same registry, read at scrape time
        self._process = ProcessCollector(registry=self.registry)
        self._build = Info("casestream_build", "Build of this process: casestream version, service, Python.",
                           registry=self.registry)
        self._build.info(build_info(service))
        for name, (kind, help_) in METRIC_HELP.items():
            unit = "s" if name.endswith("_seconds") else ""
            if kind == "histogram":
                self._histograms[name] = Histogram(name, help_, HISTOGRAM_LABELS[name],
                                                   registry=self.registry, buckets=_BUCKETS)
            elif kind == "counter":
                meter.create_observable_counter(name, [self._callback(name)], unit=unit,
                                                description=help_)
            else:
                meter.create_observable_gauge(name, [self._callback(name)], unit=unit,
                                              description=help_)

    def exposition(self) -> bytes:
        """Collect now (runs the observable callbacks) and return the Prometheus text 0.0.4
        (UTF-8, media type :data:`CONTENT_TYPE`). Scrapes are serialised: the exporter's
        collector queues one SDK collection per scrape and drains the whole queue."""
        with self._scrape:
            return generate_latest(self.registry)

    def collect(self) -> CollectorRegistry:
        """The ``prometheus_client`` registry to scrape (:func:`render_prometheus`,
        ``generate_latest``); scraping it runs the SDK collection."""
        return self.registry

    def record(self, histogram: str, seconds: float, labels: dict[str, str]) -> None:
        """Record ``seconds`` in histogram ``histogram`` (a name from METRIC_HELP) under
        ``labels`` (exactly the names in :data:`HISTOGRAM_LABELS`; KeyError/ValueError else)."""
        self._histograms[histogram].labels(**labels).observe(max(0.0, seconds))

    def observer(self, histogram: str, **labels: str) -> Callable[[float], None]:
        """The ``observe(seconds)`` of one label set of ``histogram``, bound once for a hot
        path (one call per message); same labels rule as :meth:`record`."""
        return self._histograms[histogram].labels(**labels).observe

    def shutdown(self) -> None:
        """Stop the meter provider; its reader and the histograms leave ``registry``
        (idempotent)."""
        self.provider.shutdown()
        for collector in (*self._histograms.values(), self._process, self._build):
            try:
                self.registry.unregister(collector)
            except KeyError:
                pass  # already unregistered by an earlier shutdown

    # ------------------------------------------------------------------ observations

    def _callback(self, name: str):  # noqa: ANN202 - SDK callback signature
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            try:
                return list(self._observe(name))
            except Exception:  # noqa: BLE001 - a broken source must not break the scrape
                return []
        return observe

    def _observe(self, name: str) -> Iterator[Observation]:
        s = self.sources
        with s.lock:
            consumers = dict(s.consumers)
            lags = dict(s.lags)
            relays = dict(s.relays)
            counters = dict(s.counters)
            gauge = s.gauges.get(name)
        for cname, st in consumers.items():
            lab = {"consumer": cname}
            if name == "retry_attempts_total":
                yield Observation(st.retries, lab)
            elif name == "dead_letter_total":
                yield Observation(st.dead_lettered, lab)
            elif name == "dead_letter_reason_total":
                for reason, n in dict(st.by_reason).items():
                    yield Observation(n, {**lab, "reason": reason})
            elif name == "consumer_batches_total":
                yield Observation(st.batches, lab)
            elif name == "consumer_partitions_assigned":
                yield Observation(st.partitions_assigned, lab)
            elif name == "consumer_stalls_total":
                yield Observation(st.stalls, lab)
            elif name == "consumer_client_restarts_total":
                yield Observation(st.consumer_restarts, lab)
            elif name == "consumer_messages_total":
                for outcome in _CONSUMER_OUTCOMES:
                    yield Observation(getattr(st, outcome), {**lab, "outcome": outcome})
                yield Observation(st.dead_lettered, {**lab, "outcome": "dead_lettered"})
        for cname, lag in lags.items():
            if name == "queue_messages_inflight":
                yield Observation(lag.inflight, {"consumer": cname})
            elif name in ("queue_lag_seconds", "queue_lag_messages"):
                values = lag.seconds if name == "queue_lag_seconds" else lag.messages
                for topic, v in dict(values).items():
                    yield Observation(v, {"consumer": cname, "topic": topic})
        for rname, m in relays.items():
            if name in _RELAY_COUNTERS:
                yield Observation(getattr(m, _RELAY_COUNTERS[name]), {"relay": rname})
            elif name in _RELAY_GAUGES:
                yield Observation(getattr(m, name), {"relay": rname})
            elif name == "relay_shards_held":
                yield Observation(m.shards_held, {"relay": rname})
        if name in _APP_COUNTERS:
            for obj in counters.values():
                value: Any = obj
                for attr in _APP_COUNTERS[name]:
                    value = getattr(value, attr, value if attr == "edge" else None)
                if value is not None:
                    yield Observation(value, {})
        if gauge is not None:
            for pairs, v in gauge().items():
                yield Observation(v, dict(pairs))


def render_prometheus(registry: CollectorRegistry) -> str:
    """Prometheus text format 0.0.4 of ``registry`` (``MetricsRegistry.collect()``), by
    ``prometheus_client.generate_latest``. Histograms: cumulative ``_bucket{le=...}``,
    ``_sum``, ``_count``; values as Go floats (``3.0``)."""
    return generate_latest(registry).decode("utf-8")
