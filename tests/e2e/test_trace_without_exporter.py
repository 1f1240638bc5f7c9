"""End-to-end: one case journey is one trace across the five service processes with NO span
exporter configured (``OTEL_TRACES_EXPORTER=none``): propagation does not depend on exporting.

The five services run as their own stack (default ports; never beside the shared suite stack,
which stops before any other test). One case is opened and submitted with a caller's W3C
``traceparent``; when it is closed, every event of its journey — the case's, the saga's, the
decision's, the notice's — carries that trace id in the audit journal (the envelope's
``traceparent``, as the audit service stores it) and in its Kafka ``traceparent`` header.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from casestream.kafka.topics import read_messages
from casestream.service.devstack import ServiceStack, service_port
from services.demo import SUITE, CaseSpec, headers
from services.journeys import DEMO_CASE_SETTINGS

TOPICS = ["outbox.event.case", "outbox.event.saga", "outbox.event.decision", "outbox.event.notice"]


@pytest.fixture(scope="module")
def quiet_stack(infra_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceStack]:
    env = {**infra_env, **DEMO_CASE_SETTINGS, "OTEL_TRACES_EXPORTER": "none"}
    env.pop("CASESTREAM_TELEMETRY_TRACES_FILE", None)
    stack = ServiceStack(env=env, log_dir=Path(tmp_path_factory.mktemp("e2e-quiet-trace")) / "logs")
    try:
        stack.start_all(list(SUITE))
        yield stack
    finally:
        stack.stop_all()


def _url(service: str, path: str) -> str:
    return f"http://127.0.0.1:{service_port(service)}{path}"


def _wait(predicate, timeout_s: float, what: str):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def test_one_case_is_one_trace_in_the_audit_journal_and_kafka_headers_without_an_exporter(
        quiet_stack: ServiceStack, pg_url: str, kafka_bootstrap: str) -> None:
    trace_id = secrets.token_hex(16)
    traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
    spec = CaseSpec(title="Case quiet trace market abuse", severity=4, evidence_count=2,
                    expected="violation")
    with httpx.Client(timeout=10.0) as client:
        opened = client.post(_url("case", "/cases"), json=spec.body(),
                             headers=headers(spec.tenant, traceparent=traceparent))
        assert opened.status_code == 201, opened.text
        case_id = opened.json()["id"]
        submitted = client.post(_url("case", f"/cases/{case_id}/submit"), json={},
                                headers=headers(spec.tenant, traceparent=traceparent,
                                                **{"Idempotency-Key": str(uuid.uuid4())}))
        assert submitted.status_code in (200, 202), submitted.text

        def closed() -> bool:
            r = client.get(_url("case", f"/cases/{case_id}"), headers=headers(spec.tenant))
            return r.status_code == 200 and r.json()["status"] == "closed"

        _wait(closed, 120, f"case {case_id} to close")

    def journal() -> list[tuple[str, str, str, str | None]] | None:
        with psycopg.connect(make_conninfo(pg_url, dbname="audit")) as conn:
            rows = conn.execute(
                "SELECT event_id::text, event_type, source, traceparent FROM audit_journal"
                " WHERE case_id = %s OR correlation_id = %s OR aggregate_id = %s"
                " ORDER BY occurred_at", (case_id, case_id, case_id)).fetchall()
        sources = {r[2] for r in rows}
        done = {"case", "saga", "decision", "notification"} <= sources and any(
            r[1] == "CaseClosed" for r in rows)
        return rows if done else None

    rows = _wait(journal, 60, "the audit journal to hold the journey of every service")
    off_trace = [(t, s, tp) for _, t, s, tp in rows if tp is None or tp.split("-")[1] != trace_id]
    assert not off_trace, f"events of the journey outside trace {trace_id}: {off_trace}"

    wanted = {r[0] for r in rows}
    headers_of = {}
    for m in read_messages(kafka_bootstrap, TOPICS, skip_missing=True, newest=20_000, timeout_s=30):
        h = {k: (v.decode() if v is not None else None) for k, v in (m.headers() or [])}
        if h.get("id") in wanted:
            headers_of[h["id"]] = h.get("traceparent")
    assert set(headers_of) == wanted, f"not found on the topics: {wanted - set(headers_of)}"
    off_header = {i: tp for i, tp in headers_of.items() if tp is None or tp.split("-")[1] != trace_id}
    assert not off_header, f"Kafka headers outside trace {trace_id}: {off_header}"
