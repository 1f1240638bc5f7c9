"""End-to-end observability: one case journey = one trace across the five service processes,
and ``/metrics`` counters move as they should.

The five services are the shared suite stack (``suite_stack``, tests/e2e/conftest.py), which
runs with the file span exporter (``OTEL_TRACES_EXPORTER=file``, one JSON line per span,
shared by the processes): the journey's spans are those of its own trace id, and every
metric is compared with its value at the start of the test.

Kafka consumer groups are shared with any other stack on the same broker (group id = consumer
name): run this test when no other casestream stack consumes from that broker.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from casestream.cli.status import status
from services.demo import CaseSpec, headers
from casestream.service.devstack import ServiceStack, service_port

SERVICES = ("case", "audit", "saga", "decision", "notification")  # the suite
PORTS = {name: service_port(name) for name in SERVICES}  # the shared stack's (default) ports
CONSUMERS = {"saga.orchestrator", "decision.requests", "notification.requests",
             "case.saga-requests", "audit.journal"}


@pytest.fixture(scope="module")
def observed(suite_stack: ServiceStack) -> tuple[ServiceStack, Path]:
    """The shared suite stack and its span file."""
    return suite_stack, Path(suite_stack.env["CASESTREAM_TELEMETRY_TRACES_FILE"])


def url(service: str, path: str) -> str:
    return f"http://127.0.0.1:{PORTS[service]}{path}"


def read_spans(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scrape(client: httpx.Client, service: str) -> dict[str, float]:
    """``{"name{labels}": value}`` of a service's /metrics (histogram buckets skipped)."""
    response = client.get(url(service, "/metrics"))
    assert response.status_code == 200, (service, response.text[:300])
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, float] = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#") and "_bucket{" not in line:
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def wait_for(predicate, timeout_s: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.3)


def test_one_case_journey_is_one_connected_trace_across_five_services(observed) -> None:
    stack, spans_file = observed
    trace_id, root_span = secrets.token_hex(16), secrets.token_hex(8)
    traceparent = f"00-{trace_id}-{root_span}-01"
    spec = CaseSpec(title="Case trace unlicensed trading", severity=4, evidence_count=2,
                    expected="violation")
    with httpx.Client(timeout=10.0) as client:
        opened = client.post(url("case", "/cases"), json=spec.body(),
                             headers=headers(spec.tenant, traceparent=traceparent))
        assert opened.status_code == 201, opened.text
        case_id = opened.json()["id"]
        submitted = client.post(url("case", f"/cases/{case_id}/submit"), json={},
                                headers=headers(spec.tenant, traceparent=traceparent,
                                                **{"Idempotency-Key": str(uuid.uuid4())}))
        assert submitted.status_code in (200, 202), submitted.text

        def closed() -> bool:
            r = client.get(url("case", f"/cases/{case_id}"), headers=headers(spec.tenant))
            return r.status_code == 200 and r.json()["status"] == "closed"

        wait_for(closed, 90, f"case {case_id} to close")

    def journey() -> list[dict] | None:
        mine = [s for s in read_spans(spans_file) if s["trace_id"] == trace_id]
        consumers = {s["attributes"].get("messaging.consumer.group.name") for s in mine}
        closed_audited = any(s["attributes"].get("casestream.event_type") == "CaseClosed"
                             and s["service"] == "audit" for s in mine)
        return mine if CONSUMERS <= consumers and closed_audited else None

    try:
        mine = wait_for(journey, 30, "spans of every consumer in the journey's trace")
    except AssertionError:
        mine = [s for s in read_spans(spans_file) if s["trace_id"] == trace_id]
        raise AssertionError(f"trace {trace_id} incomplete: " + json.dumps(
            sorted({(s['service'], s['name']) for s in mine}), indent=0)) from None

    assert {s["service"] for s in mine} == set(SERVICES)
    ids = {s["span_id"] for s in mine}
    dangling = [(s["service"], s["name"]) for s in mine
                if s["parent_span_id"] not in ids and s["parent_span_id"] != root_span]
    assert not dangling, f"spans whose parent is not in the trace: {dangling}"
    http = [s for s in mine if s["kind"] == "SERVER"]
    assert {s["name"] for s in http} >= {"POST /cases", "POST /cases/{case_id}/submit"}
    assert all(s["parent_span_id"] == root_span for s in http)
    producers = {s["service"] for s in mine if s["kind"] == "PRODUCER"}
    assert producers >= {"case", "saga", "decision", "notification"}
    for s in mine:
        if s["kind"] in ("PRODUCER", "CONSUMER"):
            assert s["attributes"]["messaging.system"] == "kafka"
            assert s["attributes"]["messaging.destination.name"].startswith("outbox.event.")
    assert any(s["attributes"].get("db.system") == "postgresql" for s in mine)
    # the causal chain: the saga's DecisionRequested publish descends from the case submit
    by_id = {s["span_id"]: s for s in mine}

    def ancestors(span: dict) -> list[str]:
        out = []
        while span["parent_span_id"] in by_id:
            span = by_id[span["parent_span_id"]]
            out.append(span["name"])
        return out

    decision = next(s for s in mine if s["service"] == "decision" and s["kind"] == "CONSUMER")
    assert "POST /cases/{case_id}/submit" in ancestors(decision)


def test_metrics_move_with_the_workload(observed, kafka_bootstrap: str) -> None:
    stack, _ = observed
    with httpx.Client(timeout=10.0) as client:
        before = {name: scrape(client, name) for name in SERVICES}
        for name, metrics in before.items():
            text = "\n".join(metrics)
            for family in ("retry_attempts_total", "dead_letter_total", "queue_messages_inflight",
                           "consumer_messages_total"):
                assert family in text, (name, family)
        assert 'outbox_pending_total{relay="case.relay"}' in before["case"]
        assert any(k.startswith("saga_state_total{") for k in before["saga"])

        # a poison message on outbox.event.case: audit.journal dead-letters exactly one
        key = 'dead_letter_total{consumer="audit.journal"}'
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce("outbox.event.case", key=b"poison-" + uuid.uuid4().hex.encode(),
                         value=b"\x07not avro",
                         headers=[("id", str(uuid.uuid4()).encode()), ("type", b"CaseOpened")])
        assert producer.flush(10) == 0
        wait_for(lambda: scrape(client, "audit").get(key, 0) > before["audit"].get(key, 0), 30,
                 "audit.journal dead_letter_total to rise")
        time.sleep(1.5)
        assert scrape(client, "audit")[key] == before["audit"].get(key, 0) + 1

        # an idempotent replay on the case API
        spec = CaseSpec(title="Case metrics late filing", severity=1, evidence_count=0,
                        expected="no_violation")
        case_id = client.post(url("case", "/cases"), json=spec.body(),
                              headers=headers(spec.tenant)).json()["id"]
        idem = {"Idempotency-Key": str(uuid.uuid4())}
        for _ in range(2):
            r = client.post(url("case", f"/cases/{case_id}/submit"), json={},
                            headers=headers(spec.tenant, **idem))
            assert r.status_code in (200, 202), r.text
        after = scrape(client, "case")
        assert after["idempotency_replays_total"] == before["case"].get(
            "idempotency_replays_total", 0) + 1

        # relay and consumer throughput moved
        published = 'relay_published_total{relay="case.relay"}'
        wait_for(lambda: scrape(client, "case").get(published, 0) > before["case"].get(published, 0),
                 30, "case.relay to publish")
        applied = 'consumer_messages_total{consumer="saga.orchestrator",outcome="applied"}'
        wait_for(lambda: scrape(client, "saga").get(applied, 0) > before["saga"].get(applied, 0),
                 30, "saga.orchestrator to apply")
        count = 'consumer_batch_duration_seconds_count{consumer="saga.orchestrator"}'
        assert scrape(client, "saga").get(count, 0) >= 1


def test_status_command_shows_every_service_of_the_live_stack(observed) -> None:
    result = CliRunner().invoke(status, [*SERVICES, *(f"--url={n}={url(n, '')}" for n in SERVICES), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["service"]: r for r in map(json.loads, result.output.splitlines()[-5:])}
    assert {n: r["ready"] for n, r in rows.items()} == {n: "ready" for n in SERVICES}
    assert rows["saga"]["sagas"], rows["saga"]  # sagas by state, from the saga table
    assert rows["case"]["outbox_pending"] is not None
    assert all(r["dead_letters"] is not None for r in rows.values())
    table = CliRunner().invoke(status, [*SERVICES, *(f"--url={n}={url(n, '')}" for n in SERVICES)])
    assert table.output.splitlines()[0].startswith("SERVICE")
