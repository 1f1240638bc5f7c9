"""The case HTTP API under database pressure, on the real PostgreSQL (starlette TestClient, the
service's own pool and unit of work, no Kafka).

- Lock contention on one hot aggregate: 16 clients re-assign one case at once. Every answer
  is 200 or 409 ``concurrent_modification`` (never a deadlock or another 500), the case's
  version counts exactly the accepted writes, and its outbox rows carry versions 1..V once each.
- Connection-slot exhaustion: the service's role reaches its connection limit (``CONNECTION
  LIMIT`` of a role made for the test: SQLSTATE 53300 as with ``max_connections``, without
  starving the shared server) while its pooled connections are cut. Commands answer 503 with
  ``Retry-After`` (the process does not fail), and succeed again once slots are free.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient
from test_case_support import database_url_for, memory_codec, schema_dsn_for

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.clock import SystemClock
from casestream.http import EdgePolicy
from casestream.migrations import apply_migrations
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.http.app import build_app
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application import CaseService
from services.case.bootstrap import migrations

H = bearer_headers("tenant-a", subject="officer-7")
SUP = bearer_headers("tenant-a", ("supervisor",), subject="sup-1")
EDGE = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
BODY = {"title": "Hot case", "summary": "contended", "severity": 2, "evidence_count": 0,
        "reporter_email": "clerk@example.org"}
CLIENTS = 16
ROUNDS = 6
SLOTS = 4  # the test role's CONNECTION LIMIT


@pytest.fixture(scope="module")
def dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    with schema_dsn_for(database_url_for(request), "case_pressure") as scoped:
        apply_migrations(scoped, migrations())
        yield scoped


def _client(pool: ConnectionPool) -> TestClient:
    service = CaseService(uow=PgUnitOfWork.factory(pool, OutboxWriter(memory_codec()).append),
                          clock=SystemClock(), new_id=lambda: str(uuid.uuid4()),
                          idempotency_ttl=timedelta(hours=1))
    return TestClient(build_app(service, edge=EDGE), raise_server_exceptions=False)


def test_one_hot_case_from_many_clients_keeps_its_version_guard(dsn: str) -> None:
    with ConnectionPool(dsn, min_size=CLIENTS, max_size=CLIENTS, timeout=10, open=True) as pool, \
            _client(pool) as client:
        opened = client.post("/cases", json=BODY, headers=H)
        assert opened.status_code == 201, opened.text
        case_id = opened.json()["id"]
        answers: list[tuple[int, str]] = []
        start = threading.Barrier(CLIENTS)

        def run(i: int) -> None:
            start.wait()
            for r in range(ROUNDS):
                got = client.post(f"/cases/{case_id}/assignment", json={"officer_id": f"o-{i}-{r}"},
                                  headers={**SUP, "Idempotency-Key": str(uuid.uuid4())})
                answers.append((got.status_code, got.json().get("code", "") if got.status_code != 200 else ""))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        version = client.get(f"/cases/{case_id}", headers=H).json()["version"]
    assert len(answers) == CLIENTS * ROUNDS
    assert set(answers) <= {(200, ""), (409, "concurrent_modification")}, sorted(set(answers))
    accepted = sum(1 for status, _ in answers if status == 200)
    assert accepted >= ROUNDS  # at least one writer wins each round of contention
    assert version == 1 + accepted
    with psycopg.connect(dsn) as conn:
        versions = [r[0] for r in conn.execute(
            "SELECT aggregate_version FROM outbox WHERE aggregateid = %s ORDER BY seq", (case_id,))]
    assert versions == list(range(1, version + 1))


@pytest.fixture
def limited_role(dsn: str) -> Iterator[str]:
    """``dsn`` as a login role with ``CONNECTION LIMIT`` :data:`SLOTS` and the schema's rights."""
    role = f"t_pressure_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {SLOTS}')
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    yield urlunsplit(parts._replace(netloc=f"{role}@{host}"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


def _cut(admin_dsn: str, role: str, app: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE usename = %s AND application_name = %s", (role, app)).fetchall())


def test_connection_slots_exhausted_answers_503_and_recovers(dsn: str, limited_role: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    role = urlsplit(limited_role).netloc.split("@")[0]
    pool = ConnectionPool(limited_role, min_size=2, max_size=2, timeout=2, open=True,
                          kwargs={"application_name": "pressure-service"})
    hogs: list[psycopg.Connection[Any]] = []
    try:
        with _client(pool) as client:
            assert client.post("/cases", json=BODY, headers=H).status_code == 201
            # Others take every slot left, then the service loses its connections (a failover,
            # an idle timeout, an operator's pg_terminate_backend) and cannot open new ones.
            hogs = [psycopg.connect(limited_role) for _ in range(SLOTS - 2)]
            with caplog.at_level("WARNING"):
                assert _cut(dsn, role, "pressure-service") == 2
                hogs.append(psycopg.connect(limited_role))
                hogs.append(psycopg.connect(limited_role))
                with pytest.raises(psycopg.OperationalError, match="too many connections"):
                    psycopg.connect(limited_role)
                refused = [client.post("/cases", json=BODY, headers=H) for _ in range(3)]
            assert [r.status_code for r in refused] == [503] * 3, [r.text for r in refused]
            assert all(r.headers.get("retry-after") == "1" for r in refused)
            assert any("too many connections" in r.getMessage() for r in caplog.records), \
                [r.getMessage() for r in caplog.records][-5:]
            for h in hogs:
                h.close()
            hogs = []
            deadline = threading.Event()
            for _ in range(40):  # the pool reconnects with backoff
                again = client.post("/cases", json=BODY, headers=H)
                if again.status_code == 201:
                    break
                deadline.wait(0.5)
            assert again.status_code == 201, again.text
    finally:
        for h in hogs:
            h.close()
        pool.close()
