"""The case and audit services as real processes on real Kafka, PostgreSQL and registry.

``python -m services.case`` and ``python -m services.audit`` run against a *private*
Kafka broker (same jars as ``deploy/infra.sh``, own ports: no other test's consumer group
or topic is touched), their own fresh databases on the shared PostgreSQL server, and the
shared schema registry. The test plays the saga-orchestrator by producing its facts to
``outbox.event.saga``:

- a case opened and submitted over HTTP reaches the audit timeline through the relay;
- CaseCloseRequested closes the case (CaseClosed relayed, journaled);
- the audit process is SIGKILLed mid-flow and restarted: nothing lost, nothing doubled;
- SIGTERM stops both services cleanly (exit status 0).

Needs the infrastructure of ``make infra-up`` (PostgreSQL, registry, the resolved Kafka
jars); fails with set-up instructions otherwise, like every integration test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Producer
from test_case_support import server_url

from tests.support.databases import created_databases, require_server
from tests.support.suite import SESSION_TIMEOUT_MS, private_broker
from tests.support.waiting import wait_for

from casestream.auth.tokens import bearer_headers
from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.testing.relay import PrivateKafka, free_port
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["outbox.event.case", "outbox.event.saga", "outbox.event.decision",
          "outbox.event.notice"]
TENANT = "tenant-proc"


@pytest.fixture(scope="module")
def databases(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    server = server_url(request).rstrip("/")
    admin = require_server(server)
    suffix = uuid.uuid4().hex[:8]
    names = {"case": f"case_proc_{suffix}", "audit": f"audit_proc_{suffix}"}
    with created_databases(admin, names.values()):
        yield server, names


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    with private_broker(tmp_path_factory, "case-audit-kafka", TOPICS, partitions=3) as broker:
        yield broker


class Service:
    """One service process started with ``python -m services.<name>``."""

    def __init__(self, name: str, env: dict[str, str], port: int, log: Path) -> None:
        self.name, self.env, self.port, self.log = name, env, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", f"services.{self.name}"],
                                         cwd=REPO, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self.ready, 90, f"{self.name} ready (log {self.log})")

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}: "
                                 f"{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(self.url("/readyz"), timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(45)
        self.proc = None
        return code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="module")
def services(kafka: PrivateKafka, databases: tuple[str, dict[str, str]], registry_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Service]]:
    server, names = databases
    logs = tmp_path_factory.mktemp("case-audit-logs")
    env = {**os.environ, "CASESTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "CASESTREAM_PG_URL": server, "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_CASE_DATABASE": names["case"], "CASESTREAM_AUDIT_DATABASE": names["audit"],
           "CASESTREAM_CASE_PORT": str(free_port()), "CASESTREAM_AUDIT_PORT": str(free_port()),
           # the restarted audit gets the killed one's partitions after 6 s, not 45 s
           "CASESTREAM_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS)}
    started = {
        "case": Service("case", env, int(env["CASESTREAM_CASE_PORT"]), logs / "case.log"),
        "audit": Service("audit", env, int(env["CASESTREAM_AUDIT_PORT"]), logs / "audit.log"),
    }
    try:
        for service in started.values():
            service.start()
        yield started
    finally:
        for service in started.values():
            service.stop()


@contextmanager
def saga_producer(kafka: PrivateKafka, registry_url: str) -> Iterator[Callable[[Envelope], None]]:
    """Produce saga events as the orchestrator would (real codec and registry)."""
    registry = ConfluentSchemaRegistry(registry_url)
    codec = open_codec(load_catalog(schemas_dir()), registry, auto_register=None)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                         "acks": "all"})
    try:
        codec.prepare(auto_register=True)

        def produce(env: Envelope) -> None:
            producer.produce(codec.topic_for(env), key=env.aggregate_id.encode(),
                             value=codec.encode(env), headers=codec.headers(env))
            assert producer.flush(30) == 0

        yield produce
    finally:
        producer.close()
        registry.close()


def saga_event(event_type: str, case_id: str, saga_id: str, version: int,
               **payload: Any) -> Envelope:
    return new_event(event_type=event_type, aggregate_type="saga", aggregate_id=saga_id,
                     aggregate_version=version, payload={"case_id": case_id, **payload},
                     tenant_id=TENANT, source="saga", actor_id="saga-orchestrator",
                     correlation_id=case_id, event_version=1)


def trail(audit: Service, case_id: str) -> list[str]:
    response = httpx.get(audit.url(f"/audit/cases/{case_id}"), headers=bearer_headers(TENANT),
                         timeout=5)
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return [e["event_type"] for e in response.json()["events"]]


def test_case_journey_through_kafka_with_audit_restart(
        services: dict[str, Service], kafka: PrivateKafka, registry_url: str,
        databases: tuple[str, dict[str, str]]) -> None:
    case, audit = services["case"], services["audit"]
    headers = bearer_headers(TENANT, subject="officer-p")
    created = httpx.post(case.url("/cases"), headers=headers, timeout=10, json={
        "title": "Unlicensed trading", "summary": "Stall without licence", "severity": 4,
        "evidence_count": 2, "reporter_email": "r@example.org"})
    assert created.status_code == 201, created.text
    case_id = created.json()["id"]
    key = {"Idempotency-Key": f"k-{case_id}"}
    first = httpx.post(case.url(f"/cases/{case_id}/submit"), headers={**headers, **key},
                       json={}, timeout=10)
    again = httpx.post(case.url(f"/cases/{case_id}/submit"), headers={**headers, **key},
                       json={}, timeout=10)
    assert first.status_code == again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"

    wait_for(lambda: trail(audit, case_id) == ["CaseOpened", "CaseSubmitted"], 60,
             "CaseOpened and CaseSubmitted in the audit timeline")

    assert audit.signal(signal.SIGKILL) == -signal.SIGKILL  # audit dies mid-flow
    saga_id = str(uuid.uuid4())
    with saga_producer(kafka, registry_url) as produce:
        produce(saga_event("DecisionRequested", case_id, saga_id, 1, severity=4,
                           evidence_count=2))
        produce(saga_event("CaseCloseRequested", case_id, saga_id, 2, outcome="violation",
                           penalty_cents=40_000))
    wait_for(lambda: httpx.get(case.url(f"/cases/{case_id}"), headers=headers,
                               timeout=5).json()["status"] == "closed", 60, "case closed")
    audit.start()
    expected = ["CaseOpened", "CaseSubmitted", "DecisionRequested", "CaseCloseRequested",
                "CaseClosed"]
    wait_for(lambda: trail(audit, case_id) == expected, 60, f"audit trail {expected}")

    server, names = databases
    with psycopg.connect(f"{server}/{names['audit']}") as conn:
        journal = conn.execute("SELECT event_type, count(*) FROM audit_journal "
                               "WHERE case_id = %s GROUP BY 1", (case_id,)).fetchall()
    assert dict(journal) == dict.fromkeys(expected, 1)
    with psycopg.connect(f"{server}/{names['case']}") as conn:
        outbox = conn.execute("SELECT type, status FROM outbox WHERE aggregateid = %s "
                              "ORDER BY seq", (case_id,)).fetchall()
    assert [r[0] for r in outbox] == ["CaseOpened", "CaseSubmitted", "CaseClosed"]
    assert {r[1] for r in outbox} == {"published"}

    assert case.signal(signal.SIGTERM) == 0
    assert audit.signal(signal.SIGTERM) == 0
