"""The contract every saga store meets, as test bodies run against each store.

``tests/unit/test_saga_store_contract.py`` runs them on ``MemorySagaStore`` and
``tests/integration/test_saga_store_contract.py`` on ``PgSagaStore`` (PostgreSQL). A
:class:`Backend` opens a unit of work the way the consumer runtime's batch does: committed
on a clean exit, rolled back when the block raises. Behaviour only PostgreSQL has (a second
writer blocking on the row lock, ``SKIP LOCKED`` between two schedulers) stays in
``tests/integration/test_saga_store.py``.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from casestream.errors import ConcurrencyError
from services.saga.application.ports import SagaStore
from services.saga.domain import Disposition, SagaInstance
from services.saga.domain import case_review as cr
from services.saga.domain.engine import HistoryEntry

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Backend(Protocol):
    def transaction(self) -> AbstractContextManager[SagaStore]: ...


def saga(case_id: str = "case-1", **kw: Any) -> SagaInstance:
    base: dict[str, Any] = dict(
        saga_id=str(uuid.uuid4()), definition="case-review", case_id=case_id,
        tenant_id="tenant-a", correlation_id=case_id, state=cr.AWAITING_DECISION,
        step="decide", attempts=1, deadline_at=T0 + timedelta(minutes=5),
        data={"case_id": case_id, "severity": 4, "penalty_cents": None, "title": "Ünïcode"},
        version=1, event_seq=1, last_event_id="e-1")
    base.update(kw)
    return SagaInstance(**base)


def entry(event_id: str, trigger: str = "CaseSubmitted") -> HistoryEntry:
    return HistoryEntry(at=T0, trigger=trigger, event_id=event_id, from_state=None,
                        to_state=cr.AWAITING_DECISION, disposition=Disposition.STARTED)


def a_saga_round_trips(backend: Backend) -> None:
    s = saga()
    with backend.transaction() as store:
        assert store.insert(s, started_by="submit-1", active=True)
    with backend.transaction() as store:
        got = store.get(s.saga_id)
        assert store.get(str(uuid.uuid4())) is None
    assert got == s and got is not None and got.deadline_at == s.deadline_at


def one_saga_per_start_event_and_id(backend: Backend) -> None:
    s = saga()
    with backend.transaction() as store:
        assert store.insert(s, started_by="submit-1", active=True)
        assert not store.insert(replace(s, saga_id=str(uuid.uuid4()), case_id="other"),
                                started_by="submit-1", active=True)
        assert not store.insert(replace(s, case_id="other"), started_by="submit-2", active=False)
        assert store.get(s.saga_id) == s


def only_one_active_saga_per_case(backend: Backend) -> None:
    """A second active saga of a case is refused like a duplicate start (False, nothing
    stored); finished sagas of the case may pile up."""
    first, second, done = saga(), saga(), saga(state=cr.COMPLETED, step=None, deadline_at=None)
    with backend.transaction() as store:
        assert store.insert(first, started_by="a", active=True)
        assert store.insert(second, started_by="b", active=True) is False
        assert store.insert(done, started_by="c", active=False)
    with backend.transaction() as store:
        assert store.get(second.saga_id) is None
        active = store.active_for_case("case-1")
        assert active is not None and active.saga_id == first.saga_id
        assert store.active_for_case("case-2") is None


def the_newest_saga_of_a_case_is_found(backend: Backend) -> None:
    old, new = saga(state=cr.COMPLETED, step=None, deadline_at=None), saga()
    with backend.transaction() as store:
        store.insert(old, started_by="a", active=False)
    with backend.transaction() as store:
        store.insert(new, started_by="b", active=True)
    with backend.transaction() as store:
        newest = store.newest_for_case("case-1")
        assert newest is not None and newest.saga_id == new.saga_id
        assert store.newest_for_case("nobody") is None


def an_update_at_the_expected_version_wins_a_stale_one_is_refused(backend: Backend) -> None:
    s = saga()
    with backend.transaction() as store:
        store.insert(s, started_by="x", active=True)
    with backend.transaction() as store:
        store.update(replace(s, state=cr.COMPENSATING, version=2), expected_version=1, active=True)
    with pytest.raises(ConcurrencyError) as err:
        with backend.transaction() as store:
            store.update(replace(s, state=cr.AWAITING_NOTICE, version=2), expected_version=1,
                         active=True)
    assert (err.value.expected, err.value.actual) == (1, 2)
    with pytest.raises(ConcurrencyError) as gone:
        with backend.transaction() as store:
            store.update(saga(), expected_version=1, active=True)
    assert (gone.value.expected, gone.value.actual) == (1, None)
    with backend.transaction() as store:
        got = store.get(s.saga_id)
    assert got is not None and (got.state, got.version) == (cr.COMPENSATING, 2)


def an_inactive_saga_frees_its_case(backend: Backend) -> None:
    s = saga()
    with backend.transaction() as store:
        store.insert(s, started_by="x", active=True)
        store.update(replace(s, state=cr.COMPLETED, step=None, deadline_at=None, version=2),
                     expected_version=1, active=False)
        assert store.active_for_case("case-1") is None
        assert store.insert(saga(), started_by="y", active=True)


def history_marks_seen_events(backend: Backend) -> None:
    s = saga()
    with backend.transaction() as store:
        store.insert(s, started_by="e-1", active=True)
        assert not store.seen(s.saga_id, "e-1")
        store.record(s.saga_id, entry("e-1"))
    with backend.transaction() as store:
        assert store.seen(s.saga_id, "e-1")
        assert not store.seen(s.saga_id, "e-2")


def due_sagas_are_claimed_oldest_deadline_first(backend: Backend) -> None:
    due = [saga(case_id=f"c{i}", deadline_at=T0 - timedelta(seconds=i)) for i in range(3)]
    later = saga(case_id="later", deadline_at=T0 + timedelta(hours=1))
    done = saga(case_id="done", state=cr.COMPLETED, step=None, attempts=0, deadline_at=None)
    at_now = saga(case_id="now", deadline_at=T0)
    with backend.transaction() as store:
        for i, s in enumerate([*due, later, done]):
            store.insert(s, started_by=f"e{i}", active=s.state != cr.COMPLETED)
        store.insert(at_now, started_by="e-now", active=True)
    with backend.transaction() as store:
        assert [s.case_id for s in store.claim_due(T0, 2)] == ["c2", "c1"]
    with backend.transaction() as store:
        assert sorted(s.case_id for s in store.claim_due(T0, 10)) == ["c0", "c1", "c2", "now"]
        assert store.claim_due(T0 - timedelta(hours=1), 10) == []


def a_rolled_back_unit_of_work_stores_nothing(backend: Backend) -> None:
    s = saga()
    with pytest.raises(RuntimeError):
        with backend.transaction() as store:
            store.insert(s, started_by="x", active=True)
            store.record(s.saga_id, entry("x"))
            raise RuntimeError("the batch failed after the saga's writes")
    with backend.transaction() as store:
        assert store.get(s.saga_id) is None and store.active_for_case("case-1") is None
        assert store.insert(s, started_by="x", active=True)  # the start event may come again


CONTRACT = [a_saga_round_trips, one_saga_per_start_event_and_id, only_one_active_saga_per_case,
            the_newest_saga_of_a_case_is_found,
            an_update_at_the_expected_version_wins_a_stale_one_is_refused,
            an_inactive_saga_frees_its_case, history_marks_seen_events,
            due_sagas_are_claimed_oldest_deadline_first, a_rolled_back_unit_of_work_stores_nothing]
"""Every contract body; each store's test module runs them all (parametrised by name)."""
