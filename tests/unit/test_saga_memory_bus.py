"""The saga orchestrator's consumer (its real handler registry) on the in-memory bus
(casestream.testing.MemoryBus) over ``MemorySagaStore``, and its deadline on the bus's
``ManualClock``: no Kafka, no PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from casestream.events import Envelope, new_event
from casestream.handlers import FirstSeenPolicy, HandlerRegistry
from casestream.outbox import MemorySink
from casestream.testing import ManualClock, MemoryBus
from services.saga.adapters import handlers
from services.saga.adapters.memory import MemorySagaStore
from services.saga.application.orchestrator import Orchestrator
from services.saga.domain import case_review_saga

CASE = "5d1c8f5e-0000-4000-8000-000000000002"


def submitted(version: int = 2) -> Envelope:
    return new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=CASE,
                     aggregate_version=version, tenant_id="tenant-a", source="case",
                     actor_id="officer-7", correlation_id=CASE,
                     payload={"title": "Leaky tank", "severity": 4, "evidence_count": 2,
                              "reporter_email": "inspector@example.org", "submitted_by": "officer-7"})


def test_a_submitted_case_starts_one_saga_and_its_deadline_fires_on_the_clock() -> None:
    clock, store = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC)), MemorySagaStore()
    orchestrator = Orchestrator(case_review_saga(decision_deadline=timedelta(seconds=30)),
                                clock=clock)
    # the handler's store is made from ctx.conn: on the bus ctx.conn is the memory store
    registry = handlers.register(HandlerRegistry(), orchestrator, also_known=["CaseOpened"],
                                 store=lambda conn: conn)
    bus = MemoryBus(registry, state=store, consumer=handlers.CONSUMER,
                    topic=handlers.TOPICS[0], first_seen=FirstSeenPolicy.BASELINE, clock=clock)
    started = time.perf_counter()
    start = submitted()
    outcomes = bus.publish(start, start)
    print(f"saga consumer on the memory bus: {1000 * (time.perf_counter() - started):.2f} ms")
    assert [o.outcome for o in outcomes] == ["applied", "duplicate"]
    [request] = bus.emitted
    assert (request.event_type, request.causation_id) == ("DecisionRequested", start.event_id)
    saga = store.active_for_case(CASE)
    assert saga is not None and saga.deadline_at == clock() + timedelta(seconds=30)
    sink = MemorySink()
    clock.advance(seconds=29)
    assert orchestrator.fire_due(store, sink) == 0
    clock.advance(seconds=1)
    assert orchestrator.fire_due(store, sink) == 1
    assert [e.event_type for e in sink.events] == ["CaseReturnRequested"]
