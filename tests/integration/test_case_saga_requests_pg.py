"""Consumer ``case.saga-requests`` against a real PostgreSQL, driven through the consumer
runtime's batch processor (inbox, version guard, one transaction per batch; no Kafka).

The saga's CaseCloseRequested / CaseReturnRequested become CaseClosed / CaseReturned in
the case outbox, in the same transaction as the inbox row and the case row; redelivery
changes nothing; requests that can never succeed are dead-lettered.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from test_case_support import pg_fixtures, record_of

from casestream.events.codec import EnvelopeCodec
from casestream.consumer.batch import BatchProcessor
from casestream.consumer.deadletters import MemoryDeadLetters
from casestream.events.envelope import Envelope, new_event
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.postgres import PgUnitOfWork
from services.case.adapters.saga_requests import CONSUMER
from services.case.application import CaseService, CaseView, OpenCase, StoredResponse, SubmitCase
from casestream.http import IdempotencyScope, IdempotentRequest
from casestream.clock import SystemClock
from services.case.bootstrap import consumer_registry, migrations

TENANT = "tenant-s"


dsn, codec, pool = pg_fixtures("case_saga_it", migrations, inbox=True)


@pytest.fixture(scope="module")
def service(pool: ConnectionPool[Any], codec: EnvelopeCodec) -> CaseService:
    return CaseService(uow=PgUnitOfWork.factory(pool, OutboxWriter(codec).append),
                       clock=SystemClock(), new_id=lambda: str(uuid.uuid4()),
                       idempotency_ttl=timedelta(hours=1))


@pytest.fixture
def dead() -> MemoryDeadLetters:
    return MemoryDeadLetters()


@pytest.fixture
def processor(service: CaseService, codec: EnvelopeCodec,
              dead: MemoryDeadLetters) -> BatchProcessor:
    return BatchProcessor(consumer=CONSUMER, handlers=consumer_registry(service, codec.catalog),
                          decoder=codec, dead_letters=dead, outbox=OutboxWriter(codec))


def render(view: CaseView) -> StoredResponse:
    return StoredResponse(status=200, body={"id": view.id})


def submitted_case(service: CaseService) -> str:
    response, _ = service.open_case(OpenCase(
        tenant_id=TENANT, actor_id="officer", title="t", summary="s", severity=4,
        evidence_count=2, reporter_email="r@example.org"), render)
    case_id = str(response.body["id"])
    scope = IdempotencyScope.of(tenant_id=TENANT, client_id="officer",
                                route="POST /cases/{id}/submit", raw_key=case_id)
    service.submit_case(SubmitCase(tenant_id=TENANT, actor_id="officer", case_id=case_id),
                        IdempotentRequest(scope=scope, fingerprint="f"), render)
    return case_id


def saga_event(event_type: str, case_id: str, version: int, saga_id: str,
               **payload: Any) -> Envelope:
    return new_event(event_type=event_type, aggregate_type="saga", aggregate_id=saga_id,
                     aggregate_version=version, payload={"case_id": case_id, **payload},
                     tenant_id=TENANT, source="saga", actor_id="saga-orchestrator",
                     correlation_id=case_id)


def case_outbox(dsn: str, case_id: str, codec: EnvelopeCodec) -> list[Envelope]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT payload FROM outbox WHERE aggregateid = %s ORDER BY seq",
                            (case_id,)).fetchall()
    return [codec.decode(bytes(r[0])) for r in rows]


def apply(processor: BatchProcessor, dsn: str, records: list[Any]) -> None:
    with psycopg.connect(dsn) as conn:
        processor.process(conn, records)


def test_close_request_closes_case_once(processor: BatchProcessor, service: CaseService,
                                        codec: EnvelopeCodec, dsn: str) -> None:
    case_id = submitted_case(service)
    saga_id = str(uuid.uuid4())
    requested = saga_event("DecisionRequested", case_id, 1, saga_id, severity=4, evidence_count=2)
    close = saga_event("CaseCloseRequested", case_id, 2, saga_id, outcome="violation",
                       penalty_cents=25_000)
    records = [record_of(codec, requested, offset=0), record_of(codec, close, offset=1)]
    apply(processor, dsn, records)
    apply(processor, dsn, records)  # redelivery after a crash before the offset commit

    events = case_outbox(dsn, case_id, codec)
    assert [e.event_type for e in events] == ["CaseOpened", "CaseSubmitted", "CaseClosed"]
    closed = events[-1]
    assert dict(closed.payload) == {"outcome": "violation", "penalty_cents": 25_000}
    assert closed.aggregate_version == 3 and closed.causation_id == close.event_id
    assert closed.correlation_id == case_id and closed.actor_id == "saga-orchestrator"
    view = service.get_case(TENANT, case_id)
    assert (view.status, view.outcome, view.penalty_cents) == ("closed", "violation", 25_000)
    with psycopg.connect(dsn) as conn:
        inbox = conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s AND "
                             "event_id = %s", (CONSUMER, close.event_id)).fetchone()
    assert inbox == (1,)


def test_return_request_returns_case(processor: BatchProcessor, service: CaseService,
                                     codec: EnvelopeCodec, dsn: str) -> None:
    case_id = submitted_case(service)
    saga_id = str(uuid.uuid4())
    events = [saga_event("DecisionRequested", case_id, 1, saga_id, severity=4, evidence_count=2),
              saga_event("CaseReturnRequested", case_id, 2, saga_id,
                         reason="decision service failed: rules unavailable"),
              saga_event("SagaCompensated", case_id, 3, saga_id, reason="decision failed")]
    apply(processor, dsn, [record_of(codec, e, offset=i) for i, e in enumerate(events)])
    emitted = case_outbox(dsn, case_id, codec)
    assert [e.event_type for e in emitted] == ["CaseOpened", "CaseSubmitted", "CaseReturned"]
    assert emitted[-1].payload["reason"] == "decision service failed: rules unavailable"
    assert service.get_case(TENANT, case_id).status == "returned"


def test_request_for_unknown_or_wrong_state_case_is_dead_lettered(
        processor: BatchProcessor, service: CaseService, codec: EnvelopeCodec, dsn: str,
        dead: MemoryDeadLetters) -> None:
    unknown = saga_event("CaseCloseRequested", str(uuid.uuid4()), 1, str(uuid.uuid4()),
                         outcome="no_violation", penalty_cents=None)
    case_id = submitted_case(service)
    saga_id = str(uuid.uuid4())
    close = saga_event("CaseCloseRequested", case_id, 1, saga_id, outcome="no_violation",
                       penalty_cents=None)
    late_return = saga_event("CaseReturnRequested", case_id, 2, saga_id, reason="too late")
    apply(processor, dsn, [record_of(codec, unknown, offset=10), record_of(codec, close, offset=11),
                           record_of(codec, late_return, offset=12)])
    assert sorted((d.event_id, d.reason) for d in dead.sent) == sorted([
        (unknown.event_id, "case_not_found"), (late_return.event_id, "invalid_transition")])
    assert service.get_case(TENANT, case_id).status == "closed"
    assert [e.event_type for e in case_outbox(dsn, case_id, codec)][-1] == "CaseClosed"
