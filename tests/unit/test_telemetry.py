"""Unit tests of casestream.telemetry: traceparent rules, spans, Prometheus text, JSON logs."""

from __future__ import annotations

import json
import logging
import re
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY, generate_latest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from casestream import telemetry
from casestream.consumer.records import ConsumerStats, Record
from casestream.errors import ConfigError
from casestream.outbox.relay.metrics import RelayMetrics
from casestream.telemetry.http import TracingMiddleware, metrics_route
from casestream.telemetry.logs import JsonFormatter, log_context
from casestream.telemetry.metrics import (
    BUILD_INFO,
    HISTOGRAM_LABELS,
    METRIC_HELP,
    PROCESS_METRICS,
    MetricsRegistry,
    render_prometheus,
)
from casestream.telemetry.readiness import kafka_check, registry_check
from casestream.telemetry.settings import TelemetrySettings
from casestream.telemetry.sources import Sources
from casestream.telemetry.tracing import (
    build_tracer_provider,
    context_from_traceparent,
    trace_id_of,
    traceparent_for_row,
    traceparent_of,
)

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"


@pytest.fixture()
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    telemetry.install("unit", TelemetrySettings(OTEL_TRACES_EXPORTER="none"),
                      extra_exporters=[exporter])
    return exporter


def test_traceparent_round_trip_and_invalid_values() -> None:
    assert trace_id_of(TP) == "0af7651916cd43dd8448eb211c80319c"
    assert context_from_traceparent("garbage") is None
    assert context_from_traceparent(None) is None
    assert context_from_traceparent("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None


def test_row_traceparent_is_the_current_span_only_within_the_same_trace(spans) -> None:
    tracer = telemetry.current().tracer
    assert traceparent_for_row(TP) == TP  # no current span: keep the event's
    assert traceparent_for_row(None) is None
    with tracer.start_as_current_span("child", context=context_from_traceparent(TP)) as span:
        mine = traceparent_of(span)
        assert mine != TP and trace_id_of(mine) == trace_id_of(TP)
        assert traceparent_for_row(TP) == mine        # same trace: continue from here
        assert traceparent_for_row(None) == mine      # none given: this span
        assert traceparent_for_row(OTHER) == OTHER    # another trace's cause: kept


def record(tp: str | None = TP, offset: int = 7) -> Record:
    headers = (("traceparent", tp.encode()),) if tp else ()
    return Record(topic="outbox.event.case", partition=0, offset=offset, key=b"c1", value=b"",
                  headers=headers, timestamp_ms=1_700_000_000_000)


ENV = SimpleNamespace(event_id="e1", event_type="CaseSubmitted", correlation_id="c1",
                      aggregate_id="c1", traceparent=None)


def test_publish_then_consume_forms_one_parent_chain(spans) -> None:
    row = SimpleNamespace(id="e1", type="CaseSubmitted", aggregatetype="case",
                          aggregateid="c1", traceparent=TP, correlation_id="c1")
    pub = telemetry.publish_span("case.relay", "outbox.event.case", row)
    header = pub.traceparent
    pub.end(None)
    with telemetry.consume_span("saga.orchestrator", record(header), ENV):
        pass
    publish, process = spans.get_finished_spans()
    assert publish.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert publish.parent.span_id == int(TP[36:52], 16)
    assert process.parent.span_id == publish.context.span_id
    assert process.context.trace_id == publish.context.trace_id == int(TP[3:35], 16)
    assert process.attributes["messaging.system"] == "kafka"
    assert process.attributes["messaging.destination.name"] == "outbox.event.case"
    assert process.attributes["messaging.consumer.group.name"] == "saga.orchestrator"


def test_consume_span_falls_back_to_the_envelope_traceparent(spans) -> None:
    env = SimpleNamespace(**{**vars(ENV), "traceparent": OTHER})
    with telemetry.consume_span("audit.journal", record(None), env):
        pass
    [span] = spans.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == OTHER[3:35]


def test_a_batch_span_links_messages_and_each_message_gets_a_child(spans) -> None:
    items = [(record(TP, 1), ENV), (record(OTHER, 2), ENV)]
    with telemetry.consume_batch_span("audit.journal", items):
        pass
    finished = spans.get_finished_spans()
    batch = next(s for s in finished if s.name.endswith("process batch"))
    receives = [s for s in finished if s.name.endswith("receive")]
    assert {f"{ln.context.trace_id:032x}" for ln in batch.links} == {TP[3:35], OTHER[3:35]}
    assert {f"{s.context.trace_id:032x}" for s in receives} == {TP[3:35], OTHER[3:35]}
    assert all(s.links[0].context.span_id == batch.context.span_id for s in receives)


def test_metrics_render_existing_stats_in_prometheus_text(spans) -> None:
    stats = ConsumerStats(retries=3, dead_lettered=1, applied=5)
    stats.count_reason("poison")
    probe = telemetry.consumer_probe("unit.consumer", stats)
    probe.polled([record()], None)
    probe.started(1)
    relay = RelayMetrics(published_total=4, outbox_pending_total=2,
                         outbox_oldest_pending_age_seconds=1.5, postgres_xmin_horizon_age_seconds=42.5)
    telemetry.observe_relay("unit.relay", relay)
    tel = telemetry.current()
    tel.metrics.record("consumer_message_duration_seconds", 0.02,
                       {"consumer": "unit.consumer", "topic": "t"})
    text = telemetry.render_prometheus(tel.metrics.collect())
    assert 'retry_attempts_total{consumer="unit.consumer"} 3' in text
    assert 'dead_letter_total{consumer="unit.consumer"} 1' in text
    assert 'dead_letter_reason_total{consumer="unit.consumer",reason="poison"} 1' in text
    assert 'queue_messages_inflight{consumer="unit.consumer"} 1' in text
    assert re.search(r'queue_lag_seconds\{consumer="unit.consumer",topic="outbox.event.case"\} \d', text)
    assert 'relay_published_total{relay="unit.relay"} 4' in text
    assert 'outbox_pending_total{relay="unit.relay"} 2' in text
    assert 'outbox_oldest_pending_age_seconds{relay="unit.relay"} 1.5' in text
    assert 'postgres_xmin_horizon_age_seconds{relay="unit.relay"} 42.5' in text
    assert ('consumer_message_duration_seconds_bucket{consumer="unit.consumer",le="0.025",topic="t"} 1'
            in text)
    assert 'consumer_message_duration_seconds_count{consumer="unit.consumer",topic="t"} 1' in text
    assert "# TYPE queue_lag_messages gauge" in text
    assert "# TYPE consumer_message_duration_seconds histogram" in text
    assert "otel_scope" not in text and "target_info" not in text  # only our bounded labels
    stats.dead_lettered += 1
    probe.finished()
    text = telemetry.render_prometheus(tel.metrics.collect())
    assert 'dead_letter_total{consumer="unit.consumer"} 2' in text
    assert 'queue_messages_inflight{consumer="unit.consumer"} 0' in text
    assert "consumer_batch_duration_seconds_count" in text


def test_every_name_of_issue_9_is_exposed_unchanged_by_the_exporter() -> None:
    """Counters keep one ``_total``, ``*_seconds`` instruments (unit ``s``) get no second
    suffix, gauges named ``*_total`` stay gauges; families appear once they have a sample."""
    sources = Sources()
    stats = ConsumerStats(retries=1)
    stats.count_reason("poison")
    lag = sources.add_consumer("c", stats)
    lag.seconds["t"], lag.messages["t"] = 0.5, 3
    sources.add_relay("r", RelayMetrics(outbox_oldest_pending_age_seconds=2.0))
    sources.add_counters("app", SimpleNamespace(
        idempotency_replays=1, idempotency_conflicts=0,
        edge=SimpleNamespace(shed=0, rate_limited=0, unauthorized=0, body_timeouts=0,
                             client_disconnects=0, internal_errors=0)))
    for name in ("saga_state_total", "compensation_total", "timeouts_total", "saga_stuck_total"):
        sources.add_gauge(name, lambda: {(("state", "COMPLETED"),): 1.0})
    for name in ("inbox_purged_total", "guard_compacted_total", "inbox_retention_cutoff_age_seconds",
                 "dead_letter_open"):
        sources.add_gauge(name, lambda: {(("consumer", "c"),): 1.0})
    sources.add_gauge("dead_letter_group_open", lambda: {
        (("consumer", "c"), ("failure_class", "corrupt_bytes"), ("fingerprint", "0a1b2c3d4e5f")): 2.0})
    for name in ("outbox_cdc_lag_bytes", "outbox_cdc_unconfirmed_total",
                 "outbox_cdc_oldest_unconfirmed_age_seconds", "outbox_cdc_deleted_total",
                 "outbox_cdc_slot_safe_wal_bytes"):
        sources.add_gauge(name, lambda: {(("slot", "s"),): 1.0})
    registry = MetricsRegistry("unit", sources)
    try:
        for name in METRIC_HELP:
            if METRIC_HELP[name][0] == "histogram":
                registry.record(name, 0.1, {label: "x" for label in HISTOGRAM_LABELS[name]})
        text = render_prometheus(registry.collect())
    finally:
        registry.shutdown()
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    process = {name: "counter" if name.endswith("_total") else "gauge" for name in PROCESS_METRICS}
    assert typed == {name: kind for name, (kind, _) in METRIC_HELP.items()} | process | {
        BUILD_INFO: "gauge"}
    assert "idempotency_replays_total 1.0" in text.splitlines()


def test_registries_do_not_share_prometheus_state() -> None:
    """Each MetricsRegistry has its own CollectorRegistry: two at once do not collide,
    shutdown removes the reader, and the global REGISTRY is not touched."""
    one, two = Sources(), Sources()
    one.add_consumer("one", ConsumerStats(dead_lettered=1))
    two.add_consumer("two", ConsumerStats(dead_lettered=2))
    first, second = MetricsRegistry("a", one), MetricsRegistry("b", two)
    try:
        assert 'dead_letter_total{consumer="one"} 1.0' in first.exposition().decode()
        text = second.exposition().decode()
        assert 'dead_letter_total{consumer="two"} 2.0' in text and '"one"' not in text
        assert "dead_letter_total" not in generate_latest(REGISTRY).decode()
    finally:
        first.shutdown()
    assert first.exposition() == b""
    second.shutdown()


def test_http_middleware_continues_the_callers_trace_and_metrics_route_serves_text(spans) -> None:
    seen: list[str | None] = []

    async def hello(_request):
        seen.append(telemetry.current_traceparent())
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/cases/{case_id}", hello), metrics_route()])
    client = TestClient(TracingMiddleware(app))
    assert client.get("/cases/abc", headers={"traceparent": TP}).status_code == 200
    [span] = spans.get_finished_spans()
    assert span.kind is SpanKind.SERVER and span.name == "GET /cases/{case_id}"
    assert span.parent.span_id == int(TP[36:52], 16)
    assert seen == [traceparent_of(span)]
    body = client.get("/metrics")
    assert body.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'http_server_duration_seconds_count{method="GET",status="2xx"} 1' in body.text
    assert len(spans.get_finished_spans()) == 1  # /metrics is not traced


def test_json_log_line_has_trace_and_context_and_no_email(spans) -> None:
    fmt = JsonFormatter("case")
    logger = logging.getLogger("unit.telemetry")
    with telemetry.current().tracer.start_as_current_span("s") as span, \
            log_context(consumer="case.saga-requests", event_id="e1", correlation_id="c1",
                        aggregate_id="c1"):
        rec = logger.makeRecord("unit.telemetry", logging.WARNING, __file__, 1,
                                "mail to %s failed", ("jane.doe@example.org",), None,
                                extra={"attempt": 2, "failure_class": "retryable",
                                       "idempotency_key": "key-123"})
        line = json.loads(fmt.format(rec))
    assert line["service"] == "case" and line["level"] == "WARNING"
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["consumer"] == "case.saga-requests" and line["event_id"] == "e1"
    assert line["correlation_id"] == "c1" and line["aggregate_id"] == "c1"
    assert line["attempt"] == 2 and line["failure_class"] == "retryable"
    assert "example.org" not in json.dumps(line) and "<email>" in line["message"]
    assert "key-123" not in json.dumps(line) and len(line["idempotency_key_hash"]) == 32
    assert line["timestamp"].endswith("Z")


def test_exporter_settings(tmp_path) -> None:
    assert TelemetrySettings(OTEL_TRACES_EXPORTER="none").exporters() == []
    assert TelemetrySettings(traces_file=str(tmp_path / "t.jsonl")).exporters() == ["file"]
    with pytest.raises(ConfigError):
        build_tracer_provider("x", ["zipkin"])
    with pytest.raises(ConfigError):
        build_tracer_provider("x", ["file"])
    path = tmp_path / "spans.jsonl"
    provider = build_tracer_provider("svc", ["file"], traces_file=str(path))
    with provider.get_tracer("t").start_as_current_span("one"):
        pass
    provider.shutdown()
    [line] = path.read_text().splitlines()
    assert json.loads(line)["service"] == "svc" and json.loads(line)["name"] == "one"


def test_readiness_checks_fail_fast_naming_the_dependency() -> None:
    with pytest.raises(Exception, match="registry http://127.0.0.1:9"):
        registry_check("http://127.0.0.1:9/apis/ccompat/v7", timeout_s=0.5)()
    with pytest.raises(Exception, match="kafka 127.0.0.1:9"):
        kafka_check("127.0.0.1:9", timeout_s=0.5)()


def test_metrics_are_served_in_front_of_the_apps_own_middleware(spans) -> None:
    async def deny(scope, receive, send):  # an app whose edge refuses everything
        await PlainTextResponse("no token", status_code=401)(scope, receive, send)

    telemetry.consumer_probe("unit.edge", ConsumerStats())
    client = TestClient(TracingMiddleware(deny, serve_metrics=True))
    assert client.get("/cases").status_code == 401
    scraped = client.get("/metrics")
    assert scraped.status_code == 200 and "# TYPE dead_letter_total counter" in scraped.text


def test_a_bad_exporter_setting_stops_the_service_with_status_2(monkeypatch) -> None:
    from casestream.service.process import ServiceProcess

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    process = ServiceProcess(name="t", app=Starlette(), host="127.0.0.1", port=0)
    assert process.run() == 2


ISSUE_9_METRICS = (
    "retry_attempts_total", "timeouts_total", "idempotency_replays_total",
    "idempotency_conflicts_total", "queue_lag_seconds", "queue_messages_inflight",
    "dead_letter_total", "outbox_pending_total", "outbox_oldest_pending_age_seconds",
    "saga_state_total", "compensation_total",
)
"""The metric names the suite exports, written out here so the catalogue cannot drop one silently."""


def test_the_catalogue_holds_every_metric_issue_9_names() -> None:
    missing = [name for name in ISSUE_9_METRICS if name not in METRIC_HELP]
    assert missing == []
    assert any(name.startswith("queue_lag") and "message" in name for name in METRIC_HELP), \
        "consumer lag in messages is missing"
    kinds = {kind for kind, _ in METRIC_HELP.values()}
    assert "histogram" in kinds  # relay and consumer latency histograms


def test_consume_span_without_tracing_sets_and_restores_the_log_context() -> None:
    telemetry.install("unit", TelemetrySettings(OTEL_TRACES_EXPORTER="none"))
    tel = telemetry.current()
    assert not tel.recording
    seen: list[float] = []
    tel._observers[("consumer_message_duration_seconds", ("audit.journal", "outbox.event.case"))] = (
        seen.append)
    fmt = JsonFormatter("audit")
    logger = logging.getLogger("unit.telemetry")

    def line() -> dict:
        return json.loads(fmt.format(logger.makeRecord("unit.telemetry", logging.INFO, __file__, 1,
                                                       "m", (), None)))

    with log_context(attempt=3):
        with pytest.raises(RuntimeError, match="boom"):
            with telemetry.consume_span("audit.journal", record(TP), ENV) as span:
                inside = line()
                raise RuntimeError("boom")
        after = line()
    assert not span.is_recording()
    assert inside["consumer"] == "audit.journal" and inside["event_id"] == "e1"
    assert inside["correlation_id"] == "c1" and inside["aggregate_id"] == "c1"
    assert inside["attempt"] == 3
    assert after["attempt"] == 3 and "event_id" not in after and "consumer" not in after
    assert len(seen) == 1 and seen[0] >= 0


def test_without_an_exporter_a_handler_still_continues_the_messages_trace() -> None:
    """Propagation does not depend on exporting: follow-up outbox rows written in a handler
    (per message, or a batch of one) carry the message's trace id; after it, nothing is current."""
    telemetry.install("unit", TelemetrySettings(OTEL_TRACES_EXPORTER="none"))
    assert not telemetry.current().recording
    with telemetry.consume_span("saga.orchestrator", record(TP), ENV):
        assert trace_id_of(traceparent_for_row(None)) == trace_id_of(TP)
    with telemetry.consume_batch_span("saga.orchestrator", [(record(TP), ENV)]):
        assert trace_id_of(traceparent_for_row(None)) == trace_id_of(TP)
    assert traceparent_for_row(None) is None
