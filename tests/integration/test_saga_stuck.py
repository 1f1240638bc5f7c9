"""Stuck-saga detection, late replies and the alert state against the real PostgreSQL.

Own schema in ``casestream_test`` per test (like test_saga_store.py); in-memory registry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import new_event
from casestream.outbox.writer import OutboxWriter
from casestream.outbox import OutboxSink
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.application.contract import payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.application.stuck import find_stuck, gauges
from services.saga.bootstrap import migrations
from services.saga.domain import Disposition, case_review_saga
from services.saga.domain import case_review as cr
from services import schemas_dir

T0 = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    return private_schema("saga_s", migrations())


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def event(event_type: str, aggregate_type: str, aggregate_id: str, payload: dict[str, object],
          version: int = 1):
    return new_event(event_type=event_type, aggregate_type=aggregate_type,
                     aggregate_id=aggregate_id, aggregate_version=version, tenant_id="t",
                     source=aggregate_type, actor_id="a", correlation_id="c", payload=payload)


def test_stuck_late_and_alert_on_postgres(dsn: str, codec: EnvelopeCodec) -> None:
    outbox = OutboxWriter(codec)
    definition = case_review_saga(
        decision_request_fields=payload_fields(load_catalog(schemas_dir()), "DecisionRequested"))
    clock = Clock()
    orch = Orchestrator(definition, clock=clock)
    case_ids = [str(uuid.uuid4()) for _ in range(2)]
    with psycopg.connect(dsn) as conn:
        store, sink = PgSagaStore(conn), OutboxSink(outbox, conn)
        ids = [orch.handle(store, sink, event("CaseSubmitted", "case", c, {
            "title": "T", "severity": 4, "evidence_count": 1, "reporter_email": "r@x.org",
            "submitted_by": "o"}, version=2)).saga_id for c in case_ids]
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        queries = PgSagaQueries(pool)
        deadline = T0 + timedelta(minutes=5)
        assert find_stuck(queries, definition, now=deadline + timedelta(seconds=30),
                          grace=timedelta(seconds=60), tenant_id="t") == []
        stuck = find_stuck(queries, definition, now=deadline + timedelta(seconds=61),
                           grace=timedelta(seconds=60), tenant_id="t")
        assert {s.saga_id for s in stuck} == set(ids)
        # tenant scoping happens in SQL: another tenant sees none; None means every tenant
        assert find_stuck(queries, definition, now=deadline + timedelta(seconds=61),
                          grace=timedelta(seconds=60), tenant_id="t-other") == []
        assert {s.saga_id for s in find_stuck(
            queries, definition, now=deadline + timedelta(seconds=61),
            grace=timedelta(seconds=60), tenant_id=None)} >= set(ids)
        # the scheduler fires: compensation for both; nothing is stuck any more
        clock.now = deadline
        with pool.connection() as conn:
            assert orch.fire_due(PgSagaStore(conn), OutboxSink(outbox, conn)) == 2
        assert find_stuck(queries, definition, now=deadline + timedelta(seconds=61),
                          grace=timedelta(seconds=60), tenant_id="t") == []
        # a late decision for the first saga is recorded as late (new disposition stored)
        with pool.connection() as conn:
            store = PgSagaStore(conn)
            done = orch.handle(store, OutboxSink(outbox, conn), event(
                "ViolationDetermined", "decision", case_ids[0],
                {"case_id": case_ids[0], "saga_id": ids[0], "violation_code": "REG-4",
                 "penalty_cents": 5}))
        assert done.disposition is Disposition.LATE
        assert queries.history(ids[0])[-1].entry.disposition is Disposition.LATE
        # the second saga's compensation is never confirmed -> COMPENSATION_FAILED (alert)
        for _ in range(3):
            clock.now += timedelta(minutes=3)
            with pool.connection() as conn:
                orch.fire_due(PgSagaStore(conn), OutboxSink(outbox, conn))
        assert {s.state for s in (queries.get(i) for i in ids) if s} == {cr.COMPENSATION_FAILED}
        g = gauges(queries, definition, now=clock.now, grace=timedelta(seconds=60),
                   tenant_id="t")
        assert g["sagas_alerting"] == 2 and g["sagas_stuck"] == 0
        assert gauges(queries, definition, now=clock.now, grace=timedelta(seconds=60),
                      tenant_id="t-other")["sagas_alerting"] == 0
        assert orch.metrics.get("alerts_total", cr.COMPENSATION_FAILED) == 2
        with pool.connection() as conn:
            types = [r[0] for r in conn.execute(
                "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY seq", (ids[1],))]
        assert types == ["DecisionRequested"] + ["CaseReturnRequested"] * 3 + [
            "SagaCompensationFailed"]
