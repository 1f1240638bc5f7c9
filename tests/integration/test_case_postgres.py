"""The case service's PostgreSQL adapters against a real server.

Beyond the unit-of-work contract (tests/integration/test_case_uow_contract_pg.py): repository
reads through the service, outbox rows written in the same
transaction as the case row (and rolled back with it), idempotency records (stored with
the write, replayed, conflicting, in flight, purged), concurrent submits.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from test_case_support import pg_fixtures

from casestream.events.codec import EnvelopeCodec
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application import (
    CaseService,
    CaseView,
    IdempotencyConflict,
    IdempotencyScope,
    IdempotentRequest,
    OpenCase,
    RequestInFlight,
    StoredResponse,
    SubmitCase,
)
from casestream.http import fingerprint
from casestream.clock import SystemClock
from services.case.bootstrap import migrations
from services.case.domain import CaseStatus, InvalidTransition

TENANT = "tenant-a"
SUBMIT_ROUTE = "POST /cases/{id}/submit"


dsn, codec, pool = pg_fixtures("case_it", migrations, pool_size=8)


class Clock(SystemClock):
    def __init__(self) -> None:
        self.shift = timedelta(0)

    def now(self):  # noqa: ANN201
        return super().now() + self.shift


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(pool: ConnectionPool[Any], codec: EnvelopeCodec, clock: Clock) -> CaseService:
    writer = OutboxWriter(codec)
    return CaseService(uow=PgUnitOfWork.factory(pool, writer.append), clock=clock,
                       new_id=lambda: str(uuid.uuid4()), idempotency_ttl=timedelta(minutes=10))


def render(view: CaseView) -> StoredResponse:
    return StoredResponse(status=200, body={"id": view.id, "status": view.status,
                                            "version": view.version,
                                            "submitted_at": view.submitted_at},
                          headers={"ETag": f'"{view.version}"'})


def open_case(service: CaseService, tenant: str = TENANT) -> str:
    response, _ = service.open_case(OpenCase(
        tenant_id=tenant, actor_id="officer", title="Unlicensed trading",
        summary="Stall without licence", severity=4, evidence_count=2,
        reporter_email="r@example.org", priority="LOW"), render)
    return str(response.body["id"])


def idem(case_id: str, key: str, body: dict[str, Any] | None = None,
         tenant: str = TENANT) -> IdempotentRequest:
    scope = IdempotencyScope.of(tenant_id=tenant, client_id="officer", route=SUBMIT_ROUTE,
                                raw_key=key)
    return IdempotentRequest(scope=scope, fingerprint=fingerprint(
        "POST", f"/cases/{case_id}/submit", body or {}))


def submit(service: CaseService, case_id: str, key: str, note: str | None = None,
           tenant: str = TENANT) -> tuple[StoredResponse, bool]:
    body = {"note": note} if note else {}
    return service.submit_case(
        SubmitCase(tenant_id=tenant, actor_id="officer", case_id=case_id, note=note),
        idem(case_id, key, body, tenant), render)


def outbox_rows(dsn: str, case_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, type, aggregate_version, event_version, payload, correlation_id, "
            "tenant_id FROM outbox WHERE aggregateid = %s ORDER BY seq", (case_id,)).fetchall()


def case_row(dsn: str, case_id: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT status, version FROM cases WHERE id = %s",
                            (case_id,)).fetchone()


def test_open_writes_case_row_and_decodable_outbox_row(service: CaseService, dsn: str,
                                                        codec: EnvelopeCodec) -> None:
    case_id = open_case(service)
    assert case_row(dsn, case_id) == ("open", 1)
    [(event_id, type_, agg_version, ev_version, payload, correlation, tenant)] = outbox_rows(
        dsn, case_id)
    assert (type_, agg_version, ev_version, correlation, tenant) == ("CaseOpened", 1, 3, case_id,
                                                                     TENANT)
    env = codec.decode(bytes(payload))
    assert env.event_id == str(event_id) and env.aggregate_id == case_id
    assert dict(env.payload) == {"title": "Unlicensed trading", "summary": "Stall without licence",
                                 "severity": 4, "evidence_count": 2,
                                 "reporter_email": "r@example.org", "priority": "LOW"}


def test_a_failure_after_the_outbox_append_leaves_nothing(service: CaseService, dsn: str,
                                                          pool: ConnectionPool[Any]) -> None:
    def failing_render(view: CaseView) -> StoredResponse:
        raise RuntimeError("crash after the case row and the outbox row were written")

    with psycopg.connect(dsn) as conn:
        before = conn.execute("SELECT (SELECT count(*) FROM cases), "
                              "(SELECT count(*) FROM outbox)").fetchone()
    with pytest.raises(RuntimeError):
        service.open_case(OpenCase(tenant_id=TENANT, actor_id="a", title="t", summary="s",
                                   severity=1, evidence_count=0, reporter_email="a@b.org"),
                          failing_render)
    with psycopg.connect(dsn) as conn:
        after = conn.execute("SELECT (SELECT count(*) FROM cases), "
                             "(SELECT count(*) FROM outbox)").fetchone()
    assert after == before


def test_repository_is_tenant_scoped_and_round_trips(service: CaseService) -> None:
    case_id = open_case(service)
    view = service.get_case(TENANT, case_id)
    assert (view.status, view.priority, view.severity, view.opened_by) == ("open", "LOW", 4,
                                                                           "officer")
    assert view.opened_at.tzinfo is not None
    from services.case.domain import CaseNotFound
    with pytest.raises(CaseNotFound):
        service.get_case("tenant-b", case_id)


def test_submit_stores_record_event_and_state_together(service: CaseService, dsn: str) -> None:
    case_id = open_case(service)
    response, replayed = submit(service, case_id, "key-1", note="ready")
    assert not replayed and response.body["status"] == "submitted"
    assert case_row(dsn, case_id) == ("submitted", 2)
    assert [r[1] for r in outbox_rows(dsn, case_id)] == ["CaseOpened", "CaseSubmitted"]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT key_hash, response_status, response_body, response_headers FROM "
            "idempotency_keys WHERE route = %s AND response_body->>'id' = %s",
            (SUBMIT_ROUTE, case_id)).fetchall()
    [(key_hash, status, body, headers)] = rows
    assert key_hash != "key-1" and len(key_hash) == 64  # only the hash is stored
    assert status == 200 and body["status"] == "submitted" and headers == {"ETag": '"2"'}

    again, replayed = submit(service, case_id, "key-1", note="ready")
    assert replayed and again.body == body and again.status == 200
    assert len(outbox_rows(dsn, case_id)) == 2
    with pytest.raises(IdempotencyConflict):
        submit(service, case_id, "key-1", note="changed")
    with pytest.raises(InvalidTransition):
        submit(service, case_id, "key-2")


def test_failed_submit_stores_no_record(service: CaseService, dsn: str) -> None:
    case_id = open_case(service)
    submit(service, case_id, "first")
    with pytest.raises(InvalidTransition):
        submit(service, case_id, "second")
    with psycopg.connect(dsn) as conn:
        count = conn.execute("SELECT count(*) FROM idempotency_keys "
                             "WHERE response_body->>'id' = %s", (case_id,)).fetchone()
    assert count == (1,)


def test_key_in_flight_in_another_transaction(service: CaseService, dsn: str,
                                              pool: ConnectionPool[Any],
                                              codec: EnvelopeCodec) -> None:
    case_id = open_case(service)
    request = idem(case_id, f"slow-{case_id}")
    with PgUnitOfWork(pool=pool, append=OutboxWriter(codec).append) as other:
        assert other.idempotency.try_lock(request.scope)
        with pytest.raises(RequestInFlight):
            submit(service, case_id, f"slow-{case_id}")
    response, replayed = submit(service, case_id, f"slow-{case_id}")
    assert not replayed and response.body["status"] == "submitted"


def test_concurrent_submits_exactly_one_wins(service: CaseService, dsn: str) -> None:
    case_id = open_case(service)
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            submit(service, case_id, f"race-{case_id}-{i}")
            outcomes.append("ok")
        except Exception as e:  # noqa: BLE001 - recorded and asserted below
            outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1 and len(outcomes) == 6
    assert set(outcomes) <= {"ok", "InvalidTransition", "ConcurrencyError"}, outcomes
    assert case_row(dsn, case_id) == ("submitted", 2)
    assert [r[1] for r in outbox_rows(dsn, case_id)] == ["CaseOpened", "CaseSubmitted"]


def test_same_key_concurrently_processes_once(service: CaseService, dsn: str) -> None:
    case_id = open_case(service)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def attempt() -> None:
        barrier.wait()
        try:
            _, replayed = submit(service, case_id, f"same-{case_id}")
            outcomes.append("replayed" if replayed else "ok")
        except RequestInFlight:
            outcomes.append("in_flight")
        except Exception as e:  # noqa: BLE001 - recorded and asserted below
            outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1, outcomes
    assert set(outcomes) <= {"ok", "replayed", "in_flight"}
    assert [r[1] for r in outbox_rows(dsn, case_id)] == ["CaseOpened", "CaseSubmitted"]


def test_expired_records_are_purged_and_keys_reusable(service: CaseService, clock: Clock,
                                                      dsn: str) -> None:
    first, second = open_case(service), open_case(service)
    submit(service, first, "reuse-me")
    clock.shift = timedelta(minutes=11)
    _, replayed = submit(service, second, "reuse-me")  # expired: processed, not a conflict
    assert not replayed
    clock.shift = timedelta(days=2)
    purged = 0
    while (n := service.purge_idempotency_records(limit=2)) > 0:
        purged += n
    assert purged >= 2
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM idempotency_keys").fetchone() == (0,)
    assert service.get_case(TENANT, second).status == CaseStatus.SUBMITTED.value
