"""Late and duplicate replies through the saga's real consumer runtime (Kafka + PostgreSQL).

The orchestrator's handlers (``services.saga.adapters.handlers.register``) run in a
:class:`~casestream.consumer.runtime.ConsumerRuntime` on the shared Kafka, exactly as
``bootstrap.build`` wires them (inbox, version guard, savepoints, outbox), but on private
topics and a private consumer name (so its dead-letter topic ``<name>.dlq`` is ours alone)
and a private PostgreSQL schema; the deadline scheduler's work is done by calling
``Orchestrator.fire_due`` with a controlled clock.

A reply that arrives after the step's deadline fired (compensation began), after
the compensation finished, or after the saga completed is recorded on the saga's history
and drives no forward step — and it is *not* an error: nothing is dead-lettered, nothing is
retried. A participant that emits the same reply twice as two distinct events (new event
id, so the inbox cannot catch it) causes one transition and one follow-up request.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.testing.consumer import create_topic, produce_events, run_in_thread, wait_until
from casestream.migrations import apply_migrations
from casestream.consumer.deadletters import read_topic
from casestream.events.envelope import Envelope, new_event
from casestream.handlers.registry import HandlerRegistry
from casestream.outbox.writer import OutboxWriter
from casestream.events.registry import InMemoryRegistry
from casestream.testing.relay import delete_topics
from casestream_suite_schemas.upcasters import default_upcasters
from services.saga.adapters import handlers
from casestream.outbox import OutboxSink
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.application.contract import payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.bootstrap import migrations
from services.saga.domain import Disposition, case_review_saga
from services.saga.domain import case_review as cr
from services import schemas_dir
from casestream.events import open_codec

TENANT = "tenant-saga-replies"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class World:
    bootstrap: str
    dsn: str
    topics: dict[str, str]  # "case" / "decision" / "notice" -> private topic
    codec: EnvelopeCodec
    pool: Any
    clock: Clock
    orch: Orchestrator
    runtime: ConsumerRuntime
    outbox: OutboxWriter

    @property
    def queries(self) -> PgSagaQueries:
        return PgSagaQueries(self.pool)

    def produce(self, *events: Envelope) -> None:
        by_topic: dict[str, list[Envelope]] = {}
        for e in events:
            by_topic.setdefault(self.topics[e.aggregate_type], []).append(e)
        for topic, batch in by_topic.items():
            produce_events(self.bootstrap, topic, self.codec, batch)

    def saga_of(self, case_id: str) -> Any:
        found = self.queries.list(tenant_id=TENANT, state=None, case_id=case_id, limit=5)
        return found[0] if found else None

    def history(self, saga_id: str) -> list[Any]:
        return [h.entry for h in self.queries.history(saga_id)]

    def entry_for(self, saga_id: str, event_id: str) -> Any:
        """Wait until the saga's history has an entry for ``event_id``; return it."""
        def find() -> Any:
            return next((e for e in self.history(saga_id) if e.event_id == event_id), None)
        return wait_until(find, timeout_s=30)

    def outbox_types(self, saga_id: str) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            return [r[0] for r in conn.execute(
                "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY aggregate_version",
                (saga_id,))]

    def fire_due(self) -> int:
        """What the deadline scheduler does on one round."""
        with self.pool.connection() as conn, conn.transaction():
            return self.orch.fire_due(PgSagaStore(conn), OutboxSink(self.outbox, conn))


@pytest.fixture
def world(kafka_bootstrap: str, pg_url: str) -> Iterator[World]:
    base = make_conninfo(pg_url, dbname="casestream_test")
    suffix = uuid.uuid4().hex[:10]
    schema = f"saga_r_{suffix}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    options = (conninfo_to_dict(base).get("options") or "") + f" -csearch_path={schema}"
    dsn = make_conninfo(base, options=options.strip())
    name = f"test.saga.replies-{suffix}"
    topics = {kind: f"test.saga.{suffix}.outbox.event.{kind}"
              for kind in ("case", "decision", "notice")}
    pool = None
    thread = stop = None
    try:
        apply_migrations(dsn, migrations())
        for topic in topics.values():
            create_topic(kafka_bootstrap, topic, 1)
        catalog = load_catalog(schemas_dir())
        codec = open_codec(catalog, InMemoryRegistry(), auto_register=None)
        codec.prepare(auto_register=True)
        definition = case_review_saga(
            decision_request_fields=payload_fields(catalog, "DecisionRequested"))
        clock = Clock(datetime.now(UTC))
        orch = Orchestrator(definition, clock=clock)
        outbox = OutboxWriter(codec)
        topic_types = [t for t in catalog.event_types
                       if catalog.subject_for(t).topic in handlers.TOPICS]
        registry = handlers.register(HandlerRegistry(), orch, also_known=topic_types)
        pool = ConnectionPool(dsn, min_size=1, max_size=4, open=True)
        runtime = ConsumerRuntime(name, list(topics.values()), registry, codec, pool,
                                  {"bootstrap.servers": kafka_bootstrap},
                                  ConsumerSettings(batch_size=50, poll_timeout_s=0.1),
                                  outbox=outbox)
        thread, stop = run_in_thread(runtime)
        if not runtime.ready.wait(60):
            raise AssertionError("no partition assignment within 60 s")
        yield World(kafka_bootstrap, dsn, topics, codec, pool, clock, orch, runtime, outbox)
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "consumer runtime did not stop"
        assert not thread.errors, thread.errors  # type: ignore[attr-defined]
    finally:
        if stop is not None and thread is not None and thread.is_alive():
            stop.set()
            thread.join(30)
        if pool is not None:
            pool.close()
        delete_topics(kafka_bootstrap, [*topics.values(), f"{name}.dlq", f"{name}.redrive"])
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- events as the participants publish them ------------------------------------------------
# Each aggregate's events are numbered from 1 on its topic (the consumer's version guard is
# strict); the case's CaseOpened is left out, so CaseSubmitted is the case's version 1 here.

def case_event(event_type: str, case_id: str, version: int,
               payload: dict[str, Any]) -> Envelope:
    return new_event(event_type=event_type, aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=version, tenant_id=TENANT, source="case",
                     actor_id="officer-1", correlation_id=case_id, payload=payload)


def submitted(case_id: str) -> Envelope:
    return case_event("CaseSubmitted", case_id, 1, {
        "title": "Late replies", "severity": 4, "evidence_count": 1,
        "reporter_email": "inspector@example.org", "submitted_by": "officer-1"})


def decision(event_type: str, case_id: str, saga_id: str, version: int,
             **payload: Any) -> Envelope:
    return new_event(event_type=event_type, aggregate_type="decision", aggregate_id=case_id,
                     aggregate_version=version, tenant_id=TENANT, source="decision",
                     actor_id="decision-service", correlation_id=case_id,
                     payload={"case_id": case_id, "saga_id": saga_id, **payload})


def assert_nothing_dead_lettered(w: World) -> None:
    stats = w.runtime.stats
    assert (stats.dead_lettered, stats.retries, dict(stats.by_reason)) == (0, 0, {}), stats
    assert stats.parked == 0 and stats.held == 0, stats
    assert read_topic(w.bootstrap, w.runtime.dlq_topic) == []  # the DLQ topic itself is empty


# -- tests ----------------------------------------------------------------------------------

def test_late_replies_are_recorded_not_dead_lettered_and_drive_no_step(world: World) -> None:
    w = world
    real_now = w.clock.now
    # saga A starts 10 min ago: its decision deadline (5 min) is overdue
    case_a = str(uuid.uuid4())
    w.clock.now = real_now - timedelta(minutes=10)
    w.produce(submitted(case_a))
    saga_a = wait_until(lambda: w.saga_of(case_a), timeout_s=30).saga_id
    # saga B starts now and completes
    w.clock.now = real_now
    case_b = str(uuid.uuid4())
    w.produce(submitted(case_b))
    saga_b = wait_until(lambda: w.saga_of(case_b), timeout_s=30).saga_id
    w.produce(decision("NoViolationFound", case_b, saga_b, 1))
    wait_until(lambda: w.saga_of(case_b).state == cr.AWAITING_CLOSE, timeout_s=30)
    closed_b = case_event("CaseClosed", case_b, 2, {"outcome": "no_violation",
                                                    "penalty_cents": None})
    w.produce(closed_b)
    w.entry_for(saga_b, closed_b.event_id)
    assert w.saga_of(case_b).state == cr.COMPLETED

    # the scheduler fires A's decision deadline: compensation begins
    assert w.fire_due() == 1
    assert w.saga_of(case_a).state == cr.COMPENSATING
    assert w.outbox_types(saga_a) == ["DecisionRequested", "CaseReturnRequested"]

    # 1. the decision arrives after the deadline fired (compensation began)
    late_a = decision("ViolationDetermined", case_a, saga_a, 1, violation_code="REG-4",
                      penalty_cents=5)
    w.produce(late_a)
    entry = w.entry_for(saga_a, late_a.event_id)
    assert entry.disposition is Disposition.LATE
    assert (entry.trigger, entry.from_state, entry.to_state) == (
        "ViolationDetermined", cr.COMPENSATING, cr.COMPENSATING)
    saga = w.saga_of(case_a)
    assert (saga.state, saga.step, saga.attempts) == (cr.COMPENSATING, "return_case", 1)
    assert "violation_code" not in saga.data  # the late decision's facts are not taken
    # 2. the compensation is confirmed; then another late decision arrives
    returned_a = case_event("CaseReturned", case_a, 2, {"reason": "no decision"})
    w.produce(returned_a)
    w.entry_for(saga_a, returned_a.event_id)
    assert w.saga_of(case_a).state == cr.COMPENSATED
    later_a = decision("NoViolationFound", case_a, saga_a, 2)
    w.produce(later_a)
    assert w.entry_for(saga_a, later_a.event_id).disposition is Disposition.LATE
    # 3. replies after completion: a decision, and the close confirmed again (new event ids)
    late_b = decision("ViolationDetermined", case_b, saga_b, 2, violation_code="REG-4",
                      penalty_cents=5)
    closed_b_again = case_event("CaseClosed", case_b, 3, {"outcome": "no_violation",
                                                          "penalty_cents": None})
    w.produce(late_b, closed_b_again)
    for late in (late_b, closed_b_again):
        entry = w.entry_for(saga_b, late.event_id)
        assert entry.disposition is Disposition.IGNORED
        assert (entry.from_state, entry.to_state) == (cr.COMPLETED, cr.COMPLETED)
        assert "already finished: late or duplicate reply" in entry.note

    # no forward step was driven by any late reply
    assert w.outbox_types(saga_a) == ["DecisionRequested", "CaseReturnRequested",
                                      "SagaCompensated"]
    assert w.outbox_types(saga_b) == ["DecisionRequested", "CaseCloseRequested",
                                      "SagaCompleted"]
    assert w.saga_of(case_a).state == cr.COMPENSATED
    assert w.saga_of(case_b).state == cr.COMPLETED
    assert w.orch.metrics.get("late_replies_total", "ViolationDetermined") == 1
    assert w.orch.metrics.get("late_replies_total", "NoViolationFound") == 1
    # every late reply was processed normally: applied, nothing dead-lettered or retried
    assert w.runtime.stats.applied >= 9
    assert_nothing_dead_lettered(w)


def test_same_reply_twice_with_new_event_ids_is_one_transition(world: World) -> None:
    """The decision service retried and published its reply twice: two distinct events
    (new event ids) for the same request (same saga, same step, same attempt)."""
    w = world
    case_c = str(uuid.uuid4())
    w.produce(submitted(case_c))
    saga_c = wait_until(lambda: w.saga_of(case_c), timeout_s=30).saga_id
    first = decision("NoViolationFound", case_c, saga_c, 1)
    second = decision("NoViolationFound", case_c, saga_c, 2)  # a second outbox row
    assert first.event_id != second.event_id and first.payload == second.payload
    w.produce(first, second)  # back to back: usually one consumer batch
    assert w.entry_for(saga_c, first.event_id).disposition is Disposition.TRANSITIONED
    entry = w.entry_for(saga_c, second.event_id)
    assert entry.disposition is Disposition.IGNORED
    assert (entry.from_state, entry.to_state) == (cr.AWAITING_CLOSE, cr.AWAITING_CLOSE)
    # the same reply re-published as a copy of the same version with yet another id: the
    # version guard drops it as stale before it reaches the saga
    stale_before = w.runtime.stats.stale
    third = decision("NoViolationFound", case_c, saga_c, 2)
    w.produce(third)
    wait_until(lambda: w.runtime.stats.stale > stale_before, timeout_s=30)

    transitions = [e for e in w.history(saga_c) if e.disposition is Disposition.TRANSITIONED]
    assert [(e.trigger, e.to_state) for e in transitions] == [
        ("NoViolationFound", cr.AWAITING_CLOSE)]
    assert w.outbox_types(saga_c) == ["DecisionRequested", "CaseCloseRequested"]
    saga = w.saga_of(case_c)
    assert (saga.state, saga.step, saga.attempts, saga.version) == (
        cr.AWAITING_CLOSE, "close", 1, 2)
    assert_nothing_dead_lettered(w)
