"""Saga persistence against the real PostgreSQL beyond the store contract
(tests/integration/test_saga_store_contract_pg.py): concurrent writers, deadline claims with
SKIP LOCKED, the orchestrator's unit of work (saga + history + outbox in one transaction),
and several schedulers firing deadlines exactly once.

Each test works in its own schema of database ``casestream_test`` on the server of the
``pg_url`` fixture (tests/conftest.py: fails when the infrastructure is not up).
The codec uses the in-memory schema registry (only the outbox's encoding is exercised).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.errors import ConcurrencyError, RetryableError
from casestream.outbox.writer import OutboxWriter
from casestream.outbox import OutboxSink
from services.saga.adapters.handlers import handle_event
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.adapters.scheduler import DeadlineScheduler
from services.saga.application.contract import payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.bootstrap import migrations
from services.saga.domain import Disposition, SagaInstance, case_review_saga
from services.saga.domain import case_review as cr
from services import schemas_dir

T0 = datetime.now(UTC).replace(microsecond=0)


# -- fixtures ----------------------------------------------------------------------------
@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    """A fresh schema in ``casestream_test`` with the saga migrations applied."""
    return private_schema("saga_t", migrations())


def definition(**deadlines: timedelta):
    """The case-review saga as the service builds it: request fields from the catalog."""
    return case_review_saga(
        decision_request_fields=payload_fields(load_catalog(schemas_dir()), "DecisionRequested"), **deadlines)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def submitted(case_id: str) -> Envelope:
    return new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=2, tenant_id="tenant-a", source="case", actor_id="o-1",
                     correlation_id=case_id,
                     payload={"title": "Tank", "severity": 4, "evidence_count": 2,
                              "reporter_email": "i@example.org", "submitted_by": "o-1"})


def saga(case_id: str = "case-1", **kw: Any) -> SagaInstance:
    base: dict[str, Any] = dict(
        saga_id=str(uuid.uuid4()), definition="case-review", case_id=case_id,
        tenant_id="tenant-a", correlation_id=case_id, state=cr.AWAITING_DECISION,
        step="decide", attempts=1, deadline_at=T0 + timedelta(minutes=5),
        data={"case_id": case_id, "severity": 4, "penalty_cents": None}, version=1,
        event_seq=1, last_event_id="e-1")
    base.update(kw)
    return SagaInstance(**base)


def outbox_events(dsn: str, codec: EnvelopeCodec) -> list[Envelope]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
    return [codec.decode(bytes(r[0])) for r in rows]


# -- store -------------------------------------------------------------------------------
def test_stale_version_is_refused(dsn: str) -> None:
    s = saga()
    with psycopg.connect(dsn) as conn:
        PgSagaStore(conn).insert(s, started_by="x", active=True)
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        sa, sb = PgSagaStore(a), PgSagaStore(b)
        mine, theirs = sa.get(s.saga_id), sb.get(s.saga_id)
        assert mine is not None and theirs is not None
        sa.update(replace(mine, state=cr.COMPENSATING, version=2), expected_version=1,
                  active=True)
        a.commit()
        with pytest.raises(ConcurrencyError) as err:
            sb.update(replace(theirs, state=cr.AWAITING_NOTICE, version=2), expected_version=1,
                      active=True)
        assert (err.value.expected, err.value.actual) == (1, 2)
        b.rollback()
    with psycopg.connect(dsn) as conn:
        assert PgSagaStore(conn).get(s.saga_id).state == cr.COMPENSATING  # type: ignore[union-attr]


def test_concurrent_writer_blocks_then_loses(dsn: str) -> None:
    """Under READ COMMITTED the second UPDATE waits for the first and re-checks the version."""
    s = saga()
    with psycopg.connect(dsn) as conn:
        PgSagaStore(conn).insert(s, started_by="x", active=True)
    errors: list[BaseException] = []
    started = threading.Event()
    with psycopg.connect(dsn) as a:
        PgSagaStore(a).update(replace(s, state=cr.COMPENSATING, version=2), expected_version=1,
                              active=True)  # row locked, not committed

        def second() -> None:
            with psycopg.connect(dsn) as b:
                started.set()
                try:
                    PgSagaStore(b).update(replace(s, state=cr.AWAITING_NOTICE, version=2),
                                          expected_version=1, active=True)
                except ConcurrencyError as e:
                    errors.append(e)

        t = threading.Thread(target=second)
        t.start()
        started.wait(5)
        t.join(0.5)
        assert t.is_alive(), "the second writer should wait for the row lock"
        a.commit()
        t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], ConcurrencyError)


def test_claim_due_skips_locked_rows_and_ignores_future_deadlines(dsn: str) -> None:
    due = [saga(case_id=f"c{i}", deadline_at=T0 - timedelta(seconds=i)) for i in range(3)]
    later = saga(case_id="later", deadline_at=T0 + timedelta(hours=1))
    done = saga(case_id="done", state=cr.COMPLETED, step=None, attempts=0, deadline_at=None)
    with psycopg.connect(dsn) as conn:
        store = PgSagaStore(conn)
        for i, s in enumerate([*due, later, done]):
            store.insert(s, started_by=f"e{i}", active=s.state != cr.COMPLETED)
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        first = PgSagaStore(a).claim_due(T0, 2)  # oldest deadlines first, locked
        assert [s.case_id for s in first] == ["c2", "c1"]
        second = PgSagaStore(b).claim_due(T0, 10)  # does not wait, skips the locked two
        assert [s.case_id for s in second] == ["c0"]
        third = PgSagaStore(b).claim_due(T0, 10)  # same transaction keeps its own lock
        assert [s.case_id for s in third] == ["c0"]
        a.rollback()
        b.rollback()
        assert len(PgSagaStore(a).claim_due(T0, 10)) == 3


# -- orchestrator on PostgreSQL ----------------------------------------------------------
def test_journey_commits_saga_history_and_outbox_together(dsn: str, codec: EnvelopeCodec) -> None:
    orch = Orchestrator(definition(), clock=Clock())
    outbox = OutboxWriter(codec)
    start = submitted("case-9")
    with psycopg.connect(dsn) as conn, conn.transaction() as batch:  # the runtime's batch tx
        done = handle_event(orch, conn, outbox, start)
        raise psycopg.Rollback(batch)  # the batch aborts: nothing of the handler stays
    with psycopg.connect(dsn) as conn:
        assert PgSagaStore(conn).get(done.saga_id or "") is None
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0
    with psycopg.connect(dsn) as conn:
        done = handle_event(orch, conn, outbox, start)
        conn.commit()
        saga_id = done.saga_id or ""
        reply = new_event(event_type="NoViolationFound", aggregate_type="decision",
                          aggregate_id="case-9", aggregate_version=1, tenant_id="tenant-a",
                          source="decision", actor_id="d", correlation_id="case-9",
                          payload={"case_id": "case-9", "saga_id": saga_id})
        assert handle_event(orch, conn, outbox, reply).disposition is \
            Disposition.TRANSITIONED
        assert handle_event(orch, conn, outbox, reply).note == "duplicate"
        conn.commit()
    events = outbox_events(dsn, codec)
    assert [(e.event_type, e.aggregate_id, e.aggregate_version) for e in events] == [
        ("DecisionRequested", saga_id, 1), ("CaseCloseRequested", saga_id, 2)]
    assert events[1].payload == {"case_id": "case-9", "outcome": "no_violation",
                                 "penalty_cents": None}
    assert events[1].causation_id == reply.event_id and events[0].causation_id == start.event_id
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        history = PgSagaQueries(pool).history(saga_id)
        assert [(h.entry.trigger, h.entry.to_state) for h in history] == [
            ("CaseSubmitted", cr.AWAITING_DECISION), ("NoViolationFound", cr.AWAITING_CLOSE)]
        queries = PgSagaQueries(pool)
        assert [s.saga_id for s in queries.list(tenant_id=start.tenant_id, state=cr.AWAITING_CLOSE,
                                                case_id=None, limit=10)] == [saga_id]
        assert queries.list(tenant_id="another-tenant", state=None, case_id=None, limit=10) == []
        assert queries.count_by_state(tenant_id="another-tenant") == {}
        assert queries.count_by_state(tenant_id=start.tenant_id) == {cr.AWAITING_CLOSE: 1}


def test_handler_gives_up_after_repeated_conflicts(dsn: str, codec: EnvelopeCodec) -> None:
    """A store whose update always conflicts: 3 retries, then RetryableError."""

    class Conflicting(Orchestrator):
        calls = 0

        def handle(self, store, sink, event):  # type: ignore[no-untyped-def]
            Conflicting.calls += 1
            raise ConcurrencyError("saga", "x", 1, 2)

    orch = Conflicting(definition(), clock=Clock())
    with psycopg.connect(dsn) as conn, pytest.raises(RetryableError):
        handle_event(orch, conn, OutboxWriter(codec), submitted("c"))
    assert Conflicting.calls == 3


def test_two_schedulers_fire_each_deadline_exactly_once(dsn: str, codec: EnvelopeCodec) -> None:
    clock = Clock()
    orch = Orchestrator(definition(decision_deadline=timedelta(seconds=30)), clock=clock)
    outbox = OutboxWriter(codec)
    n = 60
    with psycopg.connect(dsn) as conn:
        for i in range(n):
            handle_event(orch, conn, outbox, submitted(f"case-{i}"))
        conn.commit()
    clock.now = T0 + timedelta(seconds=31)
    with ConnectionPool(dsn, min_size=2, max_size=4) as pool:
        schedulers = [DeadlineScheduler(pool, orch, outbox, batch=7) for _ in range(2)]
        fired: list[int] = []

        def drain(s: DeadlineScheduler) -> None:
            while (k := s.run_once()) > 0:
                fired.append(k)

        threads = [threading.Thread(target=drain, args=(s,)) for s in schedulers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sum(fired) == n
        assert schedulers[0].run_once() == 0  # idempotent: nothing left to fire
    returns = [e for e in outbox_events(dsn, codec) if e.event_type == "CaseReturnRequested"]
    assert len(returns) == n == len({e.aggregate_id for e in returns})
    assert {e.payload["reason"] for e in returns} == {"no decision before the decision deadline"}
    with psycopg.connect(dsn) as conn:
        states = conn.execute("SELECT state, count(*) FROM saga GROUP BY state").fetchall()
    assert states == [(cr.COMPENSATING, n)]


def test_resolve_through_the_store(dsn: str, codec: EnvelopeCodec) -> None:
    orch = Orchestrator(definition(), clock=Clock())
    outbox = OutboxWriter(codec)
    s = saga(state=cr.MANUAL_REVIEW, step=None, attempts=0, deadline_at=None,
             data={"case_id": "case-1", "outcome": "violation", "penalty_cents": 5,
                   "review_reason": "bounced"})
    with psycopg.connect(dsn) as conn:
        PgSagaStore(conn).insert(s, started_by="x", active=True)
        conn.commit()
        # another tenant's supervisor: treated as unknown, before any state check
        assert orch.resolve(PgSagaStore(conn), OutboxSink(outbox, conn), s.saga_id,
                            reason="x", actor_id="op-9", tenant_id="tenant-b") is None
        after = orch.resolve(PgSagaStore(conn), OutboxSink(outbox, conn), s.saga_id,
                             reason="phoned the owner", actor_id="op-1", tenant_id="tenant-a")
        conn.commit()
    assert after is not None and after.state == cr.AWAITING_CLOSE and after.version == 2
    resolved, ev = outbox_events(dsn, codec)
    assert resolved.event_type == "SagaResolved" and resolved.actor_id == "op-1"
    assert dict(resolved.payload) == {"case_id": "case-1", "resolution": "close",
                                      "reason": "phoned the owner"}
    assert ev.event_type == "CaseCloseRequested" and ev.actor_id == "op-1"
    # continue the saga's event sequence (event_seq was 1)
    assert (resolved.aggregate_version, ev.aggregate_version) == (2, 3)
