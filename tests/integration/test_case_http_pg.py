"""The case HTTP API end to end against a real PostgreSQL (starlette TestClient, no Kafka).

What a client sees and what lands in the database: rows in ``cases``, ``outbox`` and
``idempotency_keys`` after each answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient
from test_case_support import database_url_for, memory_codec, schema_dsn_for

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.events.codec import EnvelopeCodec
from casestream.migrations import apply_migrations
from casestream.http import EdgePolicy
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.http.app import build_app
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application import CaseService
from casestream.clock import SystemClock
from services.case.bootstrap import migrations

H = bearer_headers("tenant-a", subject="officer-7")
EDGE = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
BODY = {"title": "Late filing", "summary": "  Annual   report late  ", "severity": 2,
        "evidence_count": 0, "reporter_email": "clerk@example.org", "priority": "HIGH"}


@pytest.fixture(scope="module")
def dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    with schema_dsn_for(database_url_for(request), "case_http_it") as scoped:
        apply_migrations(scoped, migrations())
        yield scoped


@pytest.fixture(scope="module")
def codec() -> EnvelopeCodec:
    return memory_codec()


@pytest.fixture(scope="module")
def client(dsn: str, codec: EnvelopeCodec) -> Iterator[TestClient]:
    with ConnectionPool(dsn, min_size=1, max_size=4, timeout=5, open=True) as pool:
        service = CaseService(uow=PgUnitOfWork.factory(pool, OutboxWriter(codec).append),
                              clock=SystemClock(), new_id=lambda: str(uuid.uuid4()),
                              idempotency_ttl=timedelta(hours=1))
        with TestClient(build_app(service, edge=EDGE), raise_server_exceptions=False) as c:
            yield c


def count(dsn: str, sql: str, *params: Any) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def test_open_submit_replay_conflict_read(client: TestClient, dsn: str,
                                          codec: EnvelopeCodec) -> None:
    created = client.post("/cases", json=BODY, headers=H)
    assert created.status_code == 201, created.text
    case = created.json()
    assert case["status"] == "open" and case["version"] == 1
    assert case["summary"] == "Annual   report late" and case["priority"] == "HIGH"
    case_id = case["id"]
    assert count(dsn, "SELECT count(*) FROM outbox WHERE aggregateid = %s", case_id) == 1

    headers = {**H, "Idempotency-Key": f"submit-{case_id}"}
    first = client.post(f"/cases/{case_id}/submit", json={}, headers=headers)
    assert first.status_code == 200 and first.json()["status"] == "submitted"
    replay = client.post(f"/cases/{case_id}/submit", json={}, headers=headers)
    assert replay.status_code == 200 and replay.json() == first.json()
    assert replay.headers["idempotent-replayed"] == "true"
    conflict = client.post(f"/cases/{case_id}/submit", json={"note": "other"}, headers=headers)
    assert conflict.status_code == 409 and conflict.json()["code"] == "idempotency_conflict"
    again = client.post(f"/cases/{case_id}/submit", json={},
                        headers={**H, "Idempotency-Key": f"other-{case_id}"})
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"

    # one CaseSubmitted, one stored response, whatever the retries
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT type, payload FROM outbox WHERE aggregateid = %s ORDER BY seq",
                            (case_id,)).fetchall()
    assert [r[0] for r in rows] == ["CaseOpened", "CaseSubmitted"]
    submitted = codec.decode(bytes(rows[1][1]))
    assert submitted.payload["submitted_by"] == "officer-7" and submitted.aggregate_version == 2
    assert count(dsn, "SELECT count(*) FROM idempotency_keys "
                      "WHERE response_body->>'id' = %s", case_id) == 1

    read = client.get(f"/cases/{case_id}", headers=H)
    assert read.status_code == 200 and read.json()["status"] == "submitted"
    assert read.headers["etag"] == '"2"'
    other = client.get(f"/cases/{case_id}", headers=bearer_headers("tenant-b"))
    assert other.status_code == 404 and other.json()["code"] == "case_not_found"


def test_bad_input_writes_nothing(client: TestClient, dsn: str) -> None:
    before = count(dsn, "SELECT count(*) FROM outbox")
    bad = client.post("/cases", json={**BODY, "severity": "high"}, headers=H)
    assert bad.status_code == 400
    assert bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["errors"][0]["field"] == "severity"
    malformed = client.post("/cases", content=b'{"title": "x",',
                            headers={**H, "Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["code"] == "malformed_json"
    no_key = client.post(f"/cases/{uuid.uuid4()}/submit", json={}, headers=H)
    assert no_key.status_code == 400 and no_key.json()["code"] == "missing_idempotency_key"
    unknown = client.post(f"/cases/{uuid.uuid4()}/submit", json={},
                          headers={**H, "Idempotency-Key": "k"})
    assert unknown.status_code == 404
    assert count(dsn, "SELECT count(*) FROM outbox") == before


def test_database_down_is_a_503_problem(codec: EnvelopeCodec) -> None:
    with ConnectionPool("postgresql://postgres@127.0.0.1:1/nothing", min_size=0, max_size=1,
                        timeout=0.5, open=True, reconnect_timeout=1) as pool:
        service = CaseService(uow=PgUnitOfWork.factory(pool, OutboxWriter(codec).append),
                              clock=SystemClock(), new_id=lambda: str(uuid.uuid4()),
                              idempotency_ttl=timedelta(hours=1))
        with TestClient(build_app(service, edge=EDGE), raise_server_exceptions=False) as c:
            response = c.post("/cases", json=BODY, headers=H)
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "service_unavailable"
    assert response.headers["retry-after"] == "1"
    assert "postgres" not in response.text.lower()
