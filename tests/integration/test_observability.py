"""Integration: readiness, consumer lag, and trace propagation through the outbox and relay,
against the real Kafka, PostgreSQL and schema registry."""

from __future__ import annotations

import os
import time
import uuid

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from casestream import telemetry
from casestream.cli.status import kafka_lag
from casestream.service.devstack import ServiceStack
from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import read_topics
from casestream.telemetry.readiness import dependency_checks
from casestream.telemetry.settings import TelemetrySettings
from casestream.telemetry.tracing import context_from_traceparent, traceparent_of
from test_relay_support import (  # noqa: F401 - fixtures
    base_dsn, bootstrap, dsn, env, run_until_idle, settings, topic_prefix, write,
)


def test_dependency_checks_pass_against_the_running_infrastructure(
        kafka_bootstrap: str, registry_url: str) -> None:
    checks = dependency_checks(kafka_bootstrap, registry_url)
    assert set(checks) == {"kafka", "registry"}
    for check in checks.values():
        check()  # raises if the dependency is not reachable


def test_kafka_lag_is_high_watermark_minus_committed_offset(kafka_bootstrap: str) -> None:
    topic = f"obs-lag-{uuid.uuid4().hex[:8]}"
    group = f"obs-lag-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(5):
            producer.produce(topic, value=str(i).encode())
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        finally:
            consumer.close()
        lags = kafka_lag(kafka_bootstrap, [group, f"never-{group}"])
        assert lags[group] == 3
        assert lags.get(f"never-{group}", 0) == 0
    finally:
        admin.delete_topics([topic])[topic].result(15)


def test_outbox_row_and_kafka_header_continue_the_writers_trace(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """HTTP/consumer span → outbox row traceparent → relay PRODUCER span → Kafka header."""
    exporter = InMemorySpanExporter()
    tel = telemetry.install("obs-it", TelemetrySettings(OTEL_TRACES_EXPORTER="none"),
                            extra_exporters=[exporter])
    caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    with tel.tracer.start_as_current_span("handler", context=context_from_traceparent(caller)) as h:
        write(dsn, [env("obs-1", 1), env("obs-2", 1)])
        handler = traceparent_of(h)
    with psycopg.connect(dsn) as conn:
        stored = {tp for (tp,) in conn.execute("SELECT traceparent FROM outbox")}
    assert stored == {handler}  # the current span's, not None
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix), "obs")
    try:
        assert run_until_idle(relay) == 2
    finally:
        relay.close()
    records = read_topics(bootstrap, [topic_prefix + "case"], expected=2, timeout_s=30)
    publish = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert len(publish) == 2
    assert {traceparent_of(s.get_span_context()) for s in publish} == {
        r.headers["traceparent"].decode() for r in records}
    for span in publish:
        assert f"{span.context.trace_id:032x}" == "ab" * 16
        assert span.parent.span_id == h.get_span_context().span_id
        assert span.attributes["messaging.destination.name"] == topic_prefix + "case"
    inserts = [s for s in exporter.get_finished_spans() if s.name == "INSERT outbox"]
    assert inserts and inserts[0].attributes["db.system"] == "postgresql"
    text = telemetry.render_prometheus(tel.metrics.collect())
    assert 'relay_published_total{relay="obs"} 2' in text
    assert 'relay_publish_duration_seconds_count{relay="obs",topic="%scase"} 2' % topic_prefix in text


def test_readyz_of_a_service_process_names_the_dependency_that_is_down(
        tmp_path, pg_url: str, registry_url: str) -> None:
    """The audit service with an unreachable Kafka: alive, ready for requests (its database
    answers), and its consumption signal not ready, saying 'kafka', quickly."""
    with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "obs_ready_audit" WITH (FORCE)')
        conn.execute('CREATE DATABASE "obs_ready_audit"')
    env = dict(os.environ, CASESTREAM_PG_URL=pg_url, CASESTREAM_REGISTRY_URL=registry_url,
               CASESTREAM_KAFKA_BOOTSTRAP="127.0.0.1:1", CASESTREAM_AUDIT_PORT="18310",
               CASESTREAM_AUDIT_DATABASE="obs_ready_audit")
    stack = ServiceStack(env=env, log_dir=tmp_path)
    stack.start("audit")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert stack.procs["audit"].popen.poll() is None, (tmp_path / "audit.log").read_text()
            try:
                if httpx.get("http://127.0.0.1:18310/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "audit never answered /healthz"
            time.sleep(0.3)
        assert httpx.get("http://127.0.0.1:18310/readyz", timeout=15).status_code == 200
        started = time.monotonic()
        answer = httpx.get("http://127.0.0.1:18310/readyz/consumers", timeout=15)
        assert time.monotonic() - started < 6.0
        assert answer.status_code == 503
        failing = answer.json()["failing"]
        assert "kafka" in failing and "127.0.0.1:1" in failing["kafka"]
        assert "audit.journal" in failing and "registry" not in failing
    finally:
        stack.stop("audit")
        with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "obs_ready_audit" WITH (FORCE)')
