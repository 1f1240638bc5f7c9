"""``saga_stuck_total`` at ``GET /metrics`` against the real PostgreSQL (no saga is
silently stuck: a Prometheus gauge and not only in the JSON ``/sagas/metrics``).

Own schema in ``casestream_test`` per test (like test_saga_stuck.py); in-memory registry.
The saga metrics are registered exactly as ``bootstrap.build`` does
(``register_saga_metrics``) and scraped through the shared telemetry's ``/metrics`` route
(``TracingMiddleware(serve_metrics=True)``, what ``ServiceProcess`` serves).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.testclient import TestClient

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import new_event
from casestream.outbox.writer import OutboxWriter
from casestream.telemetry import sources
from casestream.telemetry.http import TracingMiddleware
from casestream.outbox import OutboxSink
from services.saga.adapters.metrics_pg import register_saga_metrics, stuck_query
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.application.contract import payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.application.stuck import find_stuck
from services.saga.bootstrap import migrations
from services.saga.domain import case_review_saga
from services.saga.domain import case_review as cr
from services import schemas_dir

GRACE = timedelta(seconds=60)
SAGA_METRICS = ("saga_state_total", "compensation_total", "timeouts_total", "saga_stuck_total")


@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    return private_schema("saga_m", migrations())


@pytest.fixture
def own_saga_gauges() -> Iterator[None]:
    """The process-wide telemetry sources get this test's saga gauges; restored afterwards."""
    src = sources()
    with src.lock:
        saved = {m: src.gauges[m] for m in SAGA_METRICS if m in src.gauges}
    try:
        yield
    finally:
        with src.lock:
            for m in SAGA_METRICS:
                src.gauges.pop(m, None)
            src.gauges.update(saved)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def submitted(case_id: str):
    return new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=2, tenant_id="t", source="case", actor_id="a",
                     correlation_id=case_id,
                     payload={"title": "T", "severity": 4, "evidence_count": 1,
                              "reporter_email": "r@x.org", "submitted_by": "o"})


def reply(event_type: str, case_id: str, saga_id: str, payload: dict[str, object], *,
          aggregate: str = "decision", version: int = 1):
    return new_event(event_type=event_type, aggregate_type=aggregate, aggregate_id=case_id,
                     aggregate_version=version, tenant_id="t", source=aggregate, actor_id="a",
                     correlation_id=case_id,
                     payload={"case_id": case_id, "saga_id": saga_id, **payload})


def scrape(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``GET /metrics`` parsed: ``{family: [(labels, value), ...]}``."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {f.name: [(dict(s.labels), s.value) for s in f.samples]
            for f in text_string_to_metric_families(response.text)}


def stuck_gauge(client: TestClient) -> float:
    families = scrape(client)
    assert "saga_stuck_total" in families, "saga_stuck_total is not exposed at /metrics"
    samples = families["saga_stuck_total"]
    assert len(samples) == 1 and samples[0][0] == {}, samples  # one sample, no labels
    return samples[0][1]


def test_stuck_query_rejects_non_identifier_states_and_negative_grace() -> None:
    with pytest.raises(ValueError, match="identifiers"):
        stuck_query(["AWAITING'; DROP TABLE saga; --"], GRACE)
    with pytest.raises(ValueError, match="grace"):
        stuck_query(["AWAITING_DECISION"], timedelta(seconds=-1))


def test_saga_stuck_total_at_metrics_counts_stuck_sagas_and_drops_to_zero_when_resolved(
        dsn: str, own_saga_gauges: None, codec: EnvelopeCodec) -> None:
    """Stuck = waiting for a participant with no progress past deadline + grace. Counted:
    sagas whose decision deadline passed more than the grace ago. Not counted: a deadline
    not yet due, a deadline passed but still within the grace, a PARKED saga (MANUAL_REVIEW)
    and a finished one. Firing the overdue deadlines (what the scheduler does) brings the
    gauge back to 0; it never disappears."""
    outbox = OutboxWriter(codec)
    definition = case_review_saga(
        decision_request_fields=payload_fields(load_catalog(schemas_dir()), "DecisionRequested"))
    decision_deadline = definition.step("decide").deadline
    assert decision_deadline is not None
    real_now = datetime.now(UTC)
    clock = Clock(real_now - timedelta(hours=1))
    orch = Orchestrator(definition, clock=clock)

    def start(at: datetime) -> tuple[str, str]:
        clock.now = at
        case_id = str(uuid.uuid4())
        with psycopg.connect(dsn) as conn:
            saga_id = orch.handle(PgSagaStore(conn), OutboxSink(outbox, conn),
                                  submitted(case_id)).saga_id
        assert saga_id is not None
        return case_id, saga_id

    def handle(event) -> None:  # noqa: ANN001
        with psycopg.connect(dsn) as conn:
            orch.handle(PgSagaStore(conn), OutboxSink(outbox, conn), event)

    hour_ago = real_now - timedelta(hours=1)
    stuck = [start(hour_ago), start(hour_ago)]  # deadline ~55 min ago: stuck
    fresh = start(real_now)  # deadline in 5 min: waiting, not stuck
    within_grace = start(real_now - decision_deadline - GRACE / 3)  # overdue 20 s < grace
    parked_case, parked = start(hour_ago)  # -> MANUAL_REVIEW (waits for an operator)
    handle(reply("ViolationDetermined", parked_case, parked,
                 {"violation_code": "REG-4", "penalty_cents": 5}))
    handle(reply("NoticeFailed", parked_case, parked, {"reason": "bounced"}, aggregate="notice"))
    done_case, done = start(hour_ago)  # -> COMPENSATED (finished)
    handle(reply("DecisionFailed", done_case, done, {"reason": "engine down"}))
    handle(new_event(event_type="CaseReturned", aggregate_type="case", aggregate_id=done_case,
                     aggregate_version=3, tenant_id="t", source="case", actor_id="a",
                     correlation_id=done_case, payload={"reason": "engine down"}))

    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        queries = PgSagaQueries(pool)
        assert queries.get(parked).state == cr.MANUAL_REVIEW  # type: ignore[union-attr]
        assert queries.get(done).state == cr.COMPENSATED  # type: ignore[union-attr]
        register_saga_metrics(pool, definition, stuck_grace=GRACE)
        client = TestClient(TracingMiddleware(Starlette(), serve_metrics=True))

        assert stuck_gauge(client) == 2.0
        # the same rule as GET /sagas/stuck (find_stuck), counted in SQL
        listed = find_stuck(queries, definition, now=datetime.now(UTC), grace=GRACE,
                            tenant_id=None)
        assert {s.saga_id for s in listed} == {saga_id for _, saga_id in stuck}
        assert fresh[1] not in {s.saga_id for s in listed}
        assert within_grace[1] not in {s.saga_id for s in listed}
        # the other saga metrics are served from the same database alongside
        states = {labels["state"]: v for labels, v in scrape(client)["saga_state_total"]}
        assert states == {cr.AWAITING_DECISION: 4.0, cr.MANUAL_REVIEW: 1.0,
                          cr.COMPENSATED: 1.0}

        # the scheduler catches up: overdue deadlines fire (the two stuck ones and the one
        # within the grace -> COMPENSATING, new deadline in 2 min), so nothing is stuck any
        # more and the gauge reads 0 (still exposed, not absent)
        clock.now = datetime.now(UTC)
        with pool.connection() as conn:
            assert orch.fire_due(PgSagaStore(conn), OutboxSink(outbox, conn)) == 3
        assert stuck_gauge(client) == 0.0
        states_now = {queries.get(s).state for _, s in stuck}  # type: ignore[union-attr]
        assert states_now == {cr.COMPENSATING}

        # ...and becomes stuck again once the compensation's deadline is overdue too
        with pool.connection() as conn:
            conn.execute("UPDATE saga SET deadline_at = now() - interval '1 hour' "
                         "WHERE saga_id = %s::uuid", (stuck[0][1],))
        assert stuck_gauge(client) == 1.0
        # the compensation is confirmed: the saga finishes and leaves the count
        handle(new_event(event_type="CaseReturned", aggregate_type="case",
                         aggregate_id=stuck[0][0], aggregate_version=3, tenant_id="t",
                         source="case", actor_id="a", correlation_id=stuck[0][0],
                         payload={"reason": "no decision"}))
        assert queries.get(stuck[0][1]).state == cr.COMPENSATED  # type: ignore[union-attr]
        assert stuck_gauge(client) == 0.0
