"""The contract of the case service's unit of work, as test bodies run against each adapter.

``tests/unit/test_case_uow_contract.py`` runs them on ``InMemoryUnitOfWork`` and
``tests/integration/test_case_uow_contract_pg.py`` on ``PgUnitOfWork`` (PostgreSQL). A
:class:`Backend` opens a unit of work (committed on a clean exit, rolled back when its block
raises) and reads the committed outbox.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol

import pytest

from casestream.errors import ConcurrencyError
from casestream.events import Envelope
from services.case.application.integration import Causation, to_envelopes
from services.case.application.ports import UnitOfWork
from services.case.domain import CaseStatus
from services.case.domain.case import Case, CaseContent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Backend(Protocol):
    def uow(self) -> UnitOfWork: ...

    def outbox(self) -> list[Envelope]: ...


def opened(tenant_id: str = "tenant-a") -> Case:
    content = CaseContent(title="Unlicensed trading", summary="Seen at the market", severity=3,
                          evidence_count=2, reporter_email="inspector@example.org")
    return Case.open(case_id=str(uuid.uuid4()), tenant_id=tenant_id, content=content,
                     actor_id="officer", at=T0)


def save_new(backend: Backend, case: Case) -> list[Envelope]:
    with backend.uow() as uow:
        uow.cases.add(case)
        events = to_envelopes(case.pull_events(), Causation())
        uow.outbox.append(events)
    return events


def a_case_and_its_events_commit_together(backend: Backend) -> None:
    case = opened()
    events = save_new(backend, case)
    with backend.uow() as uow:
        got = uow.cases.get("tenant-a", case.id)
    assert got is not None and (got.status, got.version) == (CaseStatus.OPEN, 1)
    assert got.content == case.content
    assert [(e.event_id, e.event_type, e.aggregate_id, e.aggregate_version)
            for e in backend.outbox()] == [
        (e.event_id, e.event_type, e.aggregate_id, e.aggregate_version) for e in events]


def cases_are_tenant_scoped(backend: Backend) -> None:
    case = opened()
    save_new(backend, case)
    with backend.uow() as uow:
        assert uow.cases.get("tenant-b", case.id) is None
        assert uow.cases.get("tenant-a", str(uuid.uuid4())) is None


def a_rolled_back_unit_of_work_leaves_nothing(backend: Backend) -> None:
    case = opened()
    with pytest.raises(RuntimeError):
        with backend.uow() as uow:
            uow.cases.add(case)
            uow.outbox.append(to_envelopes(case.pull_events(), Causation()))
            raise RuntimeError("the command failed after its writes")
    with backend.uow() as uow:
        assert uow.cases.get("tenant-a", case.id) is None
    assert backend.outbox() == []


def an_update_from_a_stale_read_is_refused(backend: Backend) -> None:
    case = opened()
    save_new(backend, case)
    with backend.uow() as uow:
        stale = uow.cases.get("tenant-a", case.id)
    with backend.uow() as uow:
        current = uow.cases.get("tenant-a", case.id)
        assert current is not None
        current.submit(actor_id="officer", at=T0 + timedelta(minutes=1))
        uow.cases.update(current)
        uow.outbox.append(to_envelopes(current.pull_events(), Causation()))
    assert stale is not None
    stale.submit(actor_id="other", at=T0 + timedelta(minutes=2))
    with pytest.raises(ConcurrencyError) as err:
        with backend.uow() as uow:
            uow.cases.update(stale)
    assert (err.value.expected, err.value.actual) == (1, 2)
    with backend.uow() as uow:
        got = uow.cases.get("tenant-a", case.id)
    assert got is not None and (got.status, got.version) == (CaseStatus.SUBMITTED, 2)
    assert [e.event_type for e in backend.outbox()] == ["CaseOpened", "CaseSubmitted"]


CONTRACT = [a_case_and_its_events_commit_together, cases_are_tenant_scoped,
            a_rolled_back_unit_of_work_leaves_nothing, an_update_from_a_stale_read_is_refused]
"""Every contract body; each adapter's test module runs them all (parametrised by name)."""
