"""Decision persistence against the real PostgreSQL: one decision per case (also under
concurrent requests), the reply in the outbox in the same transaction, re-announcement.

Each test works in its own schema of ``casestream_test`` on the ``pg_url`` server.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from tests.support.waiting import run_threads

from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.outbox.writer import OutboxWriter
from casestream.outbox import OutboxSink
from services.decision.adapters.postgres import PgDecisionStore
from services.decision.application.decide import Decider
from services.decision.bootstrap import migrations
from services.decision.domain import Outcome


@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    return private_schema("decision_t", migrations())


def request(case_id: str, *, severity: int = 4, evidence: int = 2) -> Envelope:
    return new_event(event_type="DecisionRequested", aggregate_type="saga",
                     aggregate_id=str(uuid.uuid4()), aggregate_version=1, tenant_id="tenant-a",
                     source="saga", actor_id="saga-orchestrator", correlation_id=case_id,
                     payload={"case_id": case_id, "severity": severity,
                              "evidence_count": evidence})


def decide_in_tx(dsn: str, codec: EnvelopeCodec, req: Envelope) -> None:
    with psycopg.connect(dsn) as conn:
        Decider(clock=lambda: datetime.now(UTC)).handle(
            PgDecisionStore(conn), OutboxSink(OutboxWriter(codec), conn), req)
        conn.commit()


def replies(dsn: str, codec: EnvelopeCodec) -> list[Envelope]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
    return [codec.decode(bytes(r[0])) for r in rows]


def test_decision_and_reply_commit_together(dsn: str, codec: EnvelopeCodec) -> None:
    req = request("case-1")
    decide_in_tx(dsn, codec, req)
    with psycopg.connect(dsn) as conn:
        d = PgDecisionStore(conn).get("case-1")
    assert d is not None and d.verdict.outcome is Outcome.VIOLATION
    assert d.verdict.penalty_cents == 400_000 and d.saga_id == req.aggregate_id
    ev, penalty = replies(dsn, codec)
    assert (ev.event_type, ev.aggregate_type, ev.aggregate_id, ev.aggregate_version) == (
        "ViolationDetermined", "decision", "case-1", 1)
    assert ev.payload["saga_id"] == req.aggregate_id and ev.causation_id == req.event_id
    assert (penalty.event_type, penalty.aggregate_version) == ("PenaltyProposed", 2)
    assert penalty.payload["reason"] == d.verdict.penalty_reason and d.version == 2


def test_rolled_back_request_leaves_no_decision(dsn: str, codec: EnvelopeCodec) -> None:
    with psycopg.connect(dsn) as conn:
        Decider(clock=lambda: datetime.now(UTC)).handle(
            PgDecisionStore(conn), OutboxSink(OutboxWriter(codec), conn), request("case-2"))
        conn.rollback()
        assert PgDecisionStore(conn).get("case-2") is None
    assert replies(dsn, codec) == []


def test_concurrent_requests_for_one_case_store_one_decision(dsn: str, codec: EnvelopeCodec) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def go(i: int) -> None:
        try:
            barrier.wait(5)
            decide_in_tx(dsn, codec, request("case-3", severity=1 + i))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    run_threads(go, 4, timeout_s=30)
    # losers either re-announce the stored verdict or hit an optimistic conflict (retried
    # by the consumer runtime); never a second decision
    assert all(type(e).__name__ == "ConcurrencyError" for e in errors)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM decision").fetchone()[0] == 1
        version = conn.execute("SELECT version FROM decision").fetchone()[0]
    evs = replies(dsn, codec)
    # every reply states the same verdict (a violation's penalty follows it as its own event)
    assert len({e.event_type for e in evs} - {"PenaltyProposed"}) == 1
    assert [e.aggregate_version for e in evs] == list(range(1, version + 1))
