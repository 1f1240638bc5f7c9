"""The regulator's workflow on the case service's PostgreSQL adapters (real server): the
migration's new statuses and columns, evidence stored as bytea with its hash (and refused
by the table above the size limit), the search's filters and keyset pages, and the
workflow events in the outbox with the case row."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from test_case_support import pg_fixtures

from casestream.clock import SystemClock
from casestream.events.codec import EnvelopeCodec
from casestream.outbox.writer import OutboxWriter
from services.case.adapters.postgres import PgUnitOfWork
from services.case.bootstrap import migrations
from services.case.application import (
    AssignOfficer,
    CaseQuery,
    CaseService,
    CaseView,
    IdempotencyScope,
    IdempotentRequest,
    OpenCase,
    RequestEvidence,
    StoredResponse,
    SubmitEvidence,
    WithdrawCase,
)

TENANT = "tenant-w"

dsn, codec, pool = pg_fixtures("case_wf_it", migrations, pool_size=4)


@pytest.fixture
def service(pool: ConnectionPool[Any], codec: EnvelopeCodec) -> CaseService:
    writer = OutboxWriter(codec)
    return CaseService(uow=PgUnitOfWork.factory(pool, writer.append), clock=SystemClock(),
                       new_id=lambda: str(uuid.uuid4()), idempotency_ttl=timedelta(minutes=10))


def render(view: CaseView) -> StoredResponse:
    return StoredResponse(status=200, body={"id": view.id, "status": view.status,
                                            "version": view.version})


def key() -> IdempotentRequest:
    raw = str(uuid.uuid4())
    return IdempotentRequest(scope=IdempotencyScope.of(tenant_id=TENANT, client_id="c",
                                                       route="r", raw_key=raw), fingerprint=raw)


def opened(service: CaseService, severity: int = 3) -> str:
    response, _ = service.open_case(OpenCase(
        tenant_id=TENANT, actor_id="officer", title="Unlicensed trading", summary="Stall",
        severity=severity, evidence_count=1, reporter_email="r@example.org"), render)
    return str(response.body["id"])


def test_evidence_path_is_stored_with_its_content_and_events(service: CaseService,
                                                            dsn: str) -> None:
    case_id = opened(service)
    base = dict(tenant_id=TENANT, actor_id="officer", case_id=case_id)
    service.apply(AssignOfficer(**base, officer_id="o-1"), key(), render)
    service.apply(AssignOfficer(**base, officer_id="o-1"), key(), render)  # no event
    due = datetime.now(UTC) + timedelta(days=7)
    service.apply(RequestEvidence(**base, description="ledger", due_at=due), key(), render)
    content = bytes(range(256)) * 4
    answer, _ = service.apply(SubmitEvidence(**base, name="l.bin", media_type="application/x",
                                             content=content), key(), render)
    assert answer.body["status"] == "under_review" and answer.body["version"] == 4
    [item] = service.list_evidence(TENANT, case_id)
    assert item.sha256 == hashlib.sha256(content).hexdigest() and item.size_bytes == 1024
    assert service.evidence_content(TENANT, case_id, item.id) == content
    view = service.get_case(TENANT, case_id)
    assert (view.officer_id, view.evidence_status, view.evidence_due_at) == ("o-1", "submitted", due)
    with psycopg.connect(dsn) as conn:
        types = [r[0] for r in conn.execute(
            "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY seq",
            (case_id,))]
        assert types == ["CaseOpened", "CaseAssigned", "EvidenceRequested", "EvidenceSubmitted"]
        with pytest.raises(psycopg.errors.CheckViolation):  # the table holds the limit too
            conn.execute("UPDATE case_evidence SET size_bytes = 40000 WHERE id = %s", (item.id,))


def test_search_filters_and_pages_by_opened_at_then_id(service: CaseService) -> None:
    ids = [opened(service, severity=5) for _ in range(5)]
    service.apply(WithdrawCase(tenant_id=TENANT, actor_id="o", case_id=ids[1], reason="dup"),
                  key(), render)
    seen, after = [], None
    while True:
        page = service.search_cases(CaseQuery(tenant_id=TENANT, severity=5, status="open",
                                              limit=2, after=after))
        seen += [c.id for c in page]
        if len(page) < 2:
            break
        after = (page[-1].opened_at, page[-1].id)
    assert seen == [i for i in ids if i != ids[1]]
    assert [c.id for c in service.search_cases(CaseQuery(tenant_id=TENANT, status="withdrawn",
                                                         severity=5))] == [ids[1]]
    assert service.search_cases(CaseQuery(tenant_id="someone-else", severity=5)) == []
