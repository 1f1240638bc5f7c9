"""The watch example's trigger consumer on the in-memory bus (casestream.testing.MemoryBus):
its real registry, the suite contracts' upcasters, the inbox and the version guard, with the
in-memory repository standing in for PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from casestream.events import new_event
from casestream.testing import MemoryBus
from casestream_suite_schemas.upcasters import default_upcasters
from watch.adapters import projection, triggers
from watch.adapters.memory import FixedClock, MemoryWatchRepository
from watch.application import watch_case

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def case_event(event_type: str, version: int, case_id: str = "c1", **payload: object):
    return new_event(event_type=event_type, aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=version, payload=payload, tenant_id="tenant-a",
                     source="case", actor_id="officer-1", correlation_id=case_id, occurred_at=T0)


@pytest.fixture
def bus() -> MemoryBus:
    repo = MemoryWatchRepository()
    with repo():
        watch_case(repo, FixedClock(), tenant_id="tenant-a", case_id="c1", watcher_id="officer-1")
    # the handler's repository is made from ctx.conn: on the bus ctx.conn is the memory one
    registry = triggers.registry(["CaseOpened", "CaseSubmitted"], repository=lambda conn: conn)
    return MemoryBus(registry, state=repo,
                     consumer=triggers.CONSUMER, topic=triggers.TOPICS[0],
                     upcasters=default_upcasters())


def test_a_returned_then_closed_case_fires_its_watch_once_per_event(bus: MemoryBus) -> None:
    started = time.perf_counter()
    returned = case_event("CaseReturned", 1, reason="more evidence")
    outcomes = bus.publish(returned, case_event("CaseSubmitted", 2),
                           case_event("CaseClosed", 3, outcome="no_violation"))
    bus.publish(returned)  # re-delivered: the inbox skips it
    elapsed_ms = 1000 * (time.perf_counter() - started)
    print(f"watch trigger handler test: {elapsed_ms:.2f} ms")
    assert elapsed_ms < 500
    assert [o.outcome for o in outcomes] == ["applied", "unhandled", "applied"]
    assert [(e.event_type, e.aggregate_version, e.payload["trigger"], e.payload["final"])
            for e in bus.emitted] == [("WatchTriggered", 1, "CaseReturned", False),
                                      ("WatchTriggered", 2, "CaseClosed", True)]
    assert bus.emitted[0].causation_id == returned.event_id
    assert bus.skipped_duplicates == 1 and bus.dead_letters.sent == []


def test_an_event_of_a_case_seen_out_of_order_waits_for_the_gap(bus: MemoryBus) -> None:
    closed = case_event("CaseClosed", 2, outcome="violation")
    assert [o.outcome for o in bus.publish(closed)] == ["held"]
    assert bus.emitted == []
    outcomes = bus.publish(case_event("CaseSubmitted", 1))
    assert [o.outcome for o in outcomes] == ["unhandled", "applied"]
    assert [e.payload["trigger"] for e in bus.emitted] == ["CaseClosed"]


class Statements:
    """``ctx.conn`` for the projection on the bus: keeps each upsert's rows (its SQL runs on
    PostgreSQL only: tests/e2e/test_watch_example.py)."""

    def __init__(self) -> None:
        self.rows: list[list[list[object]]] = []

    def execute(self, query: object, params: tuple[str, ...]) -> None:
        self.rows.append(json.loads(params[0]))


def test_the_projection_gets_each_case_row_once_per_applied_event() -> None:
    statements = Statements()
    bus = MemoryBus(projection.registry(projection.PROJECTION.live_names(), ["CaseAssigned"]),
                    state=statements, consumer=projection.CONSUMER, topic=projection.TOPICS[0])
    opened = case_event("CaseOpened", 1, title="Leak")
    outcomes = bus.publish(opened, case_event("CaseAssigned", 2), opened,
                           case_event("CaseClosed", 3, outcome="violation"))
    assert [o.outcome for o in outcomes] == ["applied", "unhandled", "duplicate", "applied"]
    assert [[(r[0], r[2], r[3], r[4]) for r in rows] for rows in statements.rows] == [
        [("c1", "open", "Leak", 1)], [("c1", "closed", "", 3)]]
