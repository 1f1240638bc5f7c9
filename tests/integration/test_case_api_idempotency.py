"""Idempotency keys of the case API on a real PostgreSQL (starlette TestClient, no Kafka).

Replay (stored status, body and headers, ``Idempotent-Replayed``, counted), conflict,
in flight (a real concurrent request holding the key), TTL expiry and purge, scoping by
tenant, client and route, and logs that carry only the key's hash.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient
from test_case_support import database_url_for, memory_codec, schema_dsn_for

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.migrations import apply_migrations
from casestream.http import EdgePolicy
from casestream.http.pgdeadline import DeadlinePool
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.http.app import build_app
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application import CaseService
from services.case.bootstrap import migrations

TTL = timedelta(minutes=10)
A = bearer_headers("tenant-a", subject="officer-1")
BODY: dict[str, Any] = {"title": "Late filing", "summary": "Annual report late", "severity": 2,
                        "evidence_count": 0, "reporter_email": "clerk@example.org"}


class MovableClock:
    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def now(self) -> datetime:
        return self.at


@pytest.fixture(scope="module")
def dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    with schema_dsn_for(database_url_for(request), "case_api_idem") as scoped:
        apply_migrations(scoped, migrations())
        yield scoped


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
def service(dsn: str, clock: MovableClock) -> Iterator[CaseService]:
    with ConnectionPool(dsn, min_size=1, max_size=4, timeout=5, open=True) as pool:
        yield CaseService(uow=PgUnitOfWork.factory(DeadlinePool(pool),
                                                   OutboxWriter(memory_codec()).append),
                          clock=clock, new_id=lambda: str(uuid.uuid4()), idempotency_ttl=TTL)


@pytest.fixture
def client(service: CaseService) -> Iterator[TestClient]:
    edge = EdgePolicy(verifier=TokenVerifier(AuthSettings()), deadline_s=10)
    with TestClient(build_app(service, edge=edge), raise_server_exceptions=False) as c:
        yield c


def counters(client: TestClient) -> Any:
    return client.app.state.counters  # type: ignore[attr-defined]


def rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def outbox_types(dsn: str, case_id: str) -> list[str]:
    return [r[0] for r in rows(dsn, "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY seq",
                               case_id)]


def open_case(client: TestClient) -> dict[str, Any]:
    response = client.post("/cases", json=BODY, headers=A)
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_open_replays_the_stored_response_with_its_headers(client: TestClient, dsn: str) -> None:
    key = {"Idempotency-Key": f"open-{uuid.uuid4()}"}
    first = client.post("/cases", json=BODY, headers={**A, **key})
    # the same JSON re-serialised with other spacing and key order is the same request
    again = client.post("/cases", content=b'{"severity":2, "title":"Late filing",'
                        b' "summary":"Annual report late","evidence_count":0,'
                        b'"reporter_email":"clerk@example.org"}',
                        headers={**A, **key, "Content-Type": "application/json"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"] == f"/cases/{first.json()['id']}"
    assert again.headers["etag"] == first.headers["etag"] == '"1"'
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert outbox_types(dsn, first.json()["id"]) == ["CaseOpened"]
    assert counters(client).idempotency_replays == 1
    stored = rows(dsn, "SELECT response_status, response_headers FROM idempotency_keys "
                       "WHERE response_body->>'id' = %s", first.json()["id"])
    assert stored == [(201, {"ETag": '"1"', "Location": f"/cases/{first.json()['id']}"})]


def test_submit_replay_conflict_and_counters(client: TestClient, dsn: str) -> None:
    case_id = open_case(client)["id"]
    key = {**A, "Idempotency-Key": f"submit-{case_id}"}
    first = client.post(f"/cases/{case_id}/submit", json={"note": "ok"}, headers=key)
    replay = client.post(f"/cases/{case_id}/submit", json={"note": "ok"}, headers=key)
    conflict = client.post(f"/cases/{case_id}/submit", json={"note": "other"}, headers=key)
    other_case = client.post(f"/cases/{open_case(client)['id']}/submit", json={"note": "ok"},
                             headers=key)
    assert first.status_code == replay.status_code == 200
    assert replay.json() == first.json() and replay.headers["idempotent-replayed"] == "true"
    assert replay.headers["etag"] == '"2"'
    assert conflict.status_code == 409 and conflict.json()["code"] == "idempotency_conflict"
    assert other_case.status_code == 409 and other_case.json()["code"] == "idempotency_conflict"
    assert outbox_types(dsn, case_id) == ["CaseOpened", "CaseSubmitted"]
    assert (counters(client).idempotency_replays, counters(client).idempotency_conflicts) == (1, 2)


def test_request_in_flight_is_409_until_the_first_finishes(client: TestClient,
                                                           dsn: str) -> None:
    """A real first request holds the key while it waits on a row lock; a retry with the
    same key meanwhile gets 409 request_in_flight, then the stored response."""
    case_id = open_case(client)["id"]
    key = {**A, "Idempotency-Key": f"slow-{case_id}"}
    results: list[httpx.Response] = []
    with psycopg.connect(dsn) as blocker:
        blocker.execute("SELECT 1 FROM cases WHERE id = %s FOR UPDATE", (case_id,))
        first = threading.Thread(target=lambda: results.append(
            client.post(f"/cases/{case_id}/submit", json={}, headers=key)))
        first.start()
        deadline = time.monotonic() + 5
        while not rows(dsn, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"):
            assert time.monotonic() < deadline, "the first request never took the key"
            time.sleep(0.02)
        retry = client.post(f"/cases/{case_id}/submit", json={}, headers=key)
        assert retry.status_code == 409 and retry.json()["code"] == "request_in_flight"
        assert retry.headers["retry-after"] == "1"
        assert results == []  # the first is still waiting
    first.join(10)  # blocker committed: the first request goes on
    assert results and results[0].status_code == 200, results
    after = client.post(f"/cases/{case_id}/submit", json={}, headers=key)
    assert after.status_code == 200 and after.headers["idempotent-replayed"] == "true"
    assert after.json() == results[0].json()
    assert counters(client).idempotency_in_flight == 1
    assert outbox_types(dsn, case_id) == ["CaseOpened", "CaseSubmitted"]


def test_a_key_expires_after_the_ttl_and_is_purged(client: TestClient, service: CaseService,
                                                   clock: MovableClock, dsn: str) -> None:
    key = {**A, "Idempotency-Key": f"ttl-{uuid.uuid4()}"}
    first = client.post("/cases", json=BODY, headers=key)
    clock.at += TTL - timedelta(seconds=1)
    within = client.post("/cases", json={**BODY, "severity": 5}, headers=key)
    assert within.status_code == 409 and within.json()["code"] == "idempotency_conflict"
    clock.at += timedelta(seconds=1)  # expires_at reached: the key may be used again
    reused = client.post("/cases", json={**BODY, "severity": 5}, headers=key)
    assert reused.status_code == 201 and "idempotent-replayed" not in reused.headers
    assert reused.json()["id"] != first.json()["id"] and reused.json()["severity"] == 5

    expired_before = rows(dsn, "SELECT count(*) FROM idempotency_keys WHERE expires_at <= %s",
                          clock.at + TTL)[0][0]
    assert expired_before >= 1
    clock.at += TTL
    purged = service.purge_idempotency_records(limit=10_000)
    assert purged == expired_before
    assert rows(dsn, "SELECT count(*) FROM idempotency_keys WHERE expires_at <= %s",
                clock.at)[0][0] == 0


def test_keys_are_scoped_by_tenant_client_and_route(client: TestClient, dsn: str) -> None:
    raw = f"shared-{uuid.uuid4()}"
    mine = client.post("/cases", json=BODY, headers={**A, "Idempotency-Key": raw})
    other_client = client.post("/cases", json=BODY, headers={
        **bearer_headers("tenant-a", subject="officer-1", client_id="mobile-app"),
        "Idempotency-Key": raw})
    other_tenant = client.post("/cases", json=BODY, headers={
        **bearer_headers("tenant-b", subject="officer-1"), "Idempotency-Key": raw})
    submit = client.post(f"/cases/{mine.json()['id']}/submit", json={},
                         headers={**A, "Idempotency-Key": raw})
    assert [r.status_code for r in (mine, other_client, other_tenant)] == [201, 201, 201]
    assert len({r.json()["id"] for r in (mine, other_client, other_tenant)}) == 3
    assert submit.status_code == 200 and "idempotent-replayed" not in submit.headers
    scopes = rows(dsn, "SELECT tenant_id, client_id, route FROM idempotency_keys "
                       "WHERE key_hash = %s ORDER BY 1, 2, 3",
                  hashlib.sha256(raw.encode()).hexdigest())
    assert scopes == [("tenant-a", "mobile-app", "POST /cases"),
                      ("tenant-a", "officer-1", "POST /cases"),
                      ("tenant-a", "officer-1", "POST /cases/{id}/submit"),
                      ("tenant-b", "officer-1", "POST /cases")]


def test_the_raw_key_is_never_stored_or_logged(client: TestClient, dsn: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    raw = f"secret-key-{uuid.uuid4()}"
    with caplog.at_level(logging.DEBUG):
        client.post("/cases", json=BODY, headers={**A, "Idempotency-Key": raw})
        client.post("/cases", json=BODY, headers={**A, "Idempotency-Key": raw})
        client.post("/cases", json={**BODY, "severity": 1}, headers={**A, "Idempotency-Key": raw})
    assert raw not in caplog.text
    assert hashlib.sha256(raw.encode()).hexdigest()[:16] in caplog.text
    with psycopg.connect(dsn) as conn:
        dump = conn.execute("SELECT idempotency_keys::text FROM idempotency_keys").fetchall()
    assert not any(raw in row[0] for row in dump)
