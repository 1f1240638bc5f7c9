"""Unit tests of the case use cases over in-memory adapters (services.case.application)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from casestream.errors import ConcurrencyError
from services.case.adapters.memory import InMemoryStore, InMemoryUnitOfWork
from services.case.application import (
    CaseService,
    CaseView,
    Causation,
    CloseCase,
    IdempotencyConflict,
    IdempotencyScope,
    IdempotentRequest,
    OpenCase,
    PreconditionFailed,
    RequestInFlight,
    ReturnCase,
    StoredResponse,
    SubmitCase,
)
from casestream.http import fingerprint, hash_key
from services.case.domain import CaseNotFound, CaseStatus, CaseValidationError, InvalidTransition

TENANT = "tenant-a"


class FakeClock:
    def __init__(self) -> None:
        self.at = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(store: InMemoryStore, clock: FakeClock) -> CaseService:
    ids = (f"00000000-0000-4000-8000-{n:012d}" for n in itertools.count(1))
    return CaseService(uow=lambda: InMemoryUnitOfWork(store), clock=clock,
                       new_id=lambda: next(ids), idempotency_ttl=timedelta(hours=1))


def render(status: int = 200):  # noqa: ANN201 - test helper
    def _render(view: CaseView) -> StoredResponse:
        return StoredResponse(status=status, body={"id": view.id, "status": view.status,
                                                   "version": view.version},
                              headers={"ETag": f'"{view.version}"'})
    return _render


def open_cmd(**overrides: Any) -> OpenCase:
    fields: dict[str, Any] = dict(tenant_id=TENANT, actor_id="officer-1", title="Late filing",
                                  summary="Annual report filed 3 months late", severity=2,
                                  evidence_count=1, reporter_email="r@example.org",
                                  priority="HIGH")
    fields.update(overrides)
    return OpenCase(**fields)


def open_case(service: CaseService, **overrides: Any) -> str:
    response, replayed = service.open_case(open_cmd(**overrides), render(201))
    assert not replayed
    return str(response.body["id"])


def request(case_id: str, key: str = "key-1", body: dict[str, Any] | None = None,
            tenant: str = TENANT, actor: str = "officer-1") -> IdempotentRequest:
    path = f"/cases/{case_id}/submit"
    scope = IdempotencyScope.of(tenant_id=tenant, client_id=actor,
                                route="POST /cases/{id}/submit", raw_key=key)
    return IdempotentRequest(scope=scope, fingerprint=fingerprint("POST", path, body or {}))


def submit(service: CaseService, case_id: str, *, key: str = "key-1",
           body: dict[str, Any] | None = None, expected: int | None = None,
           tenant: str = TENANT) -> tuple[StoredResponse, bool]:
    note = (body or {}).get("note")
    cmd = SubmitCase(tenant_id=tenant, actor_id="officer-1", case_id=case_id, note=note,
                     expected_version=expected)
    return service.submit_case(cmd, request(case_id, key, body, tenant), render())


class TestOpen:
    def test_writes_case_and_case_opened_v3_together(self, service: CaseService,
                                                     store: InMemoryStore) -> None:
        case_id = open_case(service, traceparent=None)
        assert store.cases[case_id].status is CaseStatus.OPEN
        [event] = store.outbox
        assert (event.event_type, event.event_version, event.aggregate_type) == ("CaseOpened", 3,
                                                                                 "case")
        assert (event.aggregate_id, event.aggregate_version, event.tenant_id) == (case_id, 1, TENANT)
        assert event.source == "case" and event.actor_id == "officer-1"
        assert event.correlation_id == case_id and event.causation_id is None
        assert dict(event.payload) == {
            "title": "Late filing", "summary": "Annual report filed 3 months late",
            "severity": 2, "evidence_count": 1, "reporter_email": "r@example.org",
            "priority": "HIGH"}

    def test_traceparent_is_carried(self, service: CaseService, store: InMemoryStore) -> None:
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        open_case(service, traceparent=tp)
        assert store.outbox[0].traceparent == tp

    def test_invalid_content_writes_nothing(self, service: CaseService,
                                            store: InMemoryStore) -> None:
        with pytest.raises(CaseValidationError) as err:
            service.open_case(open_cmd(severity=9), render(201))
        assert err.value.field == "severity"
        assert store.cases == {} and store.outbox == [] and store.commits == 0

    def test_optional_idempotency_key_replays_the_created_case(self, service: CaseService,
                                                               store: InMemoryStore) -> None:
        scope = IdempotencyScope.of(tenant_id=TENANT, client_id="officer-1", route="POST /cases",
                                    raw_key="open-1")
        idem = IdempotentRequest(scope=scope, fingerprint=fingerprint("POST", "/cases", {"a": 1}))
        first, replayed1 = service.open_case(open_cmd(), render(201), idem)
        second, replayed2 = service.open_case(open_cmd(), render(201), idem)
        assert (replayed1, replayed2) == (False, True)
        assert first == second and len(store.cases) == 1 and len(store.outbox) == 1


class TestSubmit:
    def test_submits_and_stores_response_in_the_same_unit_of_work(
            self, service: CaseService, store: InMemoryStore) -> None:
        case_id = open_case(service)
        commits = store.commits
        response, replayed = submit(service, case_id)
        assert not replayed and response.body == {"id": case_id, "status": "submitted",
                                                   "version": 2}
        assert store.commits == commits + 1  # state, event and record: one commit
        submitted = store.outbox[-1]
        assert (submitted.event_type, submitted.event_version, submitted.aggregate_version) == (
            "CaseSubmitted", 1, 2)
        assert dict(submitted.payload) == {"title": "Late filing", "severity": 2,
                                           "evidence_count": 1, "reporter_email": "r@example.org",
                                           "submitted_by": "officer-1"}
        [record] = store.records.values()
        assert record.response == response
        assert record.scope.key_hash == hash_key("key-1") and "key-1" not in repr(record.scope)

    def test_same_key_same_body_replays_without_a_second_event(
            self, service: CaseService, store: InMemoryStore) -> None:
        case_id = open_case(service)
        first, _ = submit(service, case_id, body={"note": "x"})
        events = len(store.outbox)
        again, replayed = submit(service, case_id, body={"note": "x"})
        assert replayed and again == first and len(store.outbox) == events

    def test_replay_still_works_after_the_case_moved_on(self, service: CaseService,
                                                        store: InMemoryStore) -> None:
        case_id = open_case(service)
        first, _ = submit(service, case_id)
        with InMemoryUnitOfWork(store) as uow:
            service.close_case(uow, CloseCase(tenant_id=TENANT, case_id=case_id,
                                              outcome="no_violation", penalty_cents=None,
                                              actor_id="saga", causation=Causation()))
        again, replayed = submit(service, case_id)
        assert replayed and again == first

    def test_same_key_different_body_is_a_conflict(self, service: CaseService,
                                                   store: InMemoryStore) -> None:
        case_id = open_case(service)
        submit(service, case_id, body={"note": "a"})
        events = len(store.outbox)
        with pytest.raises(IdempotencyConflict):
            submit(service, case_id, body={"note": "b"})
        assert len(store.outbox) == events

    def test_same_key_for_another_case_is_a_conflict(self, service: CaseService) -> None:
        first, second = open_case(service), open_case(service)
        submit(service, first)
        with pytest.raises(IdempotencyConflict):
            submit(service, second)

    def test_keys_are_scoped_by_tenant(self, service: CaseService) -> None:
        mine = open_case(service)
        theirs = open_case(service, tenant_id="tenant-b")
        submit(service, mine)
        _, replayed = submit(service, theirs, tenant="tenant-b")
        assert not replayed

    def test_key_in_flight_is_refused(self, service: CaseService, store: InMemoryStore) -> None:
        case_id = open_case(service)
        with InMemoryUnitOfWork(store) as other:
            assert other.idempotency.try_lock(request(case_id).scope)
            with pytest.raises(RequestInFlight):
                submit(service, case_id)
        submit(service, case_id)  # released with the other unit of work

    def test_expired_key_may_be_reused(self, service: CaseService, clock: FakeClock,
                                       store: InMemoryStore) -> None:
        first, second = open_case(service), open_case(service)
        submit(service, first)
        clock.advance(3601)
        response, replayed = submit(service, second)
        assert not replayed and response.body["id"] == second
        assert service.purge_idempotency_records() == 0  # the reused key is fresh again
        clock.advance(3601)
        assert service.purge_idempotency_records() == 1 and store.records == {}

    def test_not_open_is_invalid_and_stores_nothing(self, service: CaseService,
                                                    store: InMemoryStore) -> None:
        case_id = open_case(service)
        submit(service, case_id, key="k1")
        with pytest.raises(InvalidTransition):
            submit(service, case_id, key="k2")
        assert len(store.records) == 1

    def test_unknown_case_and_other_tenant_are_not_found(self, service: CaseService) -> None:
        with pytest.raises(CaseNotFound):
            submit(service, "00000000-0000-4000-8000-999999999999")
        case_id = open_case(service)
        with pytest.raises(CaseNotFound):
            submit(service, case_id, tenant="tenant-b")
        with pytest.raises(CaseNotFound):
            service.get_case("tenant-b", case_id)

    def test_if_match_version_mismatch(self, service: CaseService, store: InMemoryStore) -> None:
        case_id = open_case(service)
        with pytest.raises(PreconditionFailed) as err:
            submit(service, case_id, expected=7)
        assert (err.value.expected, err.value.actual) == (7, 1)
        assert store.cases[case_id].status is CaseStatus.OPEN and store.records == {}
        response, _ = submit(service, case_id, key="k2", expected=1)
        assert response.body["version"] == 2

    def test_lost_race_raises_concurrency_error(self, service: CaseService,
                                                store: InMemoryStore) -> None:
        case_id = open_case(service)
        with InMemoryUnitOfWork(store) as uow:
            stale = uow.cases.get(TENANT, case_id)
        submit(service, case_id)
        assert stale is not None
        stale.submit(actor_id="other", at=datetime.now(UTC))
        with pytest.raises(ConcurrencyError) as err:
            with InMemoryUnitOfWork(store) as uow:
                uow.cases.update(stale)
        assert (err.value.expected, err.value.actual) == (1, 2)


class TestSagaRequests:
    def causation(self) -> Causation:
        return Causation(correlation_id="corr-1", causation_id="evt-9",
                         traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

    def submitted(self, service: CaseService) -> str:
        case_id = open_case(service)
        submit(service, case_id)
        return case_id

    def test_close_writes_case_closed_caused_by_the_request(self, service: CaseService,
                                                           store: InMemoryStore) -> None:
        case_id = self.submitted(service)
        cmd = CloseCase(tenant_id=TENANT, case_id=case_id, outcome="violation",
                        penalty_cents=50_000, actor_id="saga", causation=self.causation())
        with InMemoryUnitOfWork(store) as uow:
            assert service.close_case(uow, cmd)
        event = store.outbox[-1]
        assert (event.event_type, event.aggregate_version) == ("CaseClosed", 3)
        assert dict(event.payload) == {"outcome": "violation", "penalty_cents": 50_000}
        assert (event.correlation_id, event.causation_id) == ("corr-1", "evt-9")
        assert event.traceparent == self.causation().traceparent and event.actor_id == "saga"
        assert service.get_case(TENANT, case_id).status == "closed"
        events = len(store.outbox)
        with InMemoryUnitOfWork(store) as uow:
            assert not service.close_case(uow, cmd)  # a repeated request is a no-op
        assert len(store.outbox) == events

    def test_return_writes_case_returned(self, service: CaseService,
                                         store: InMemoryStore) -> None:
        case_id = self.submitted(service)
        cmd = ReturnCase(tenant_id=TENANT, case_id=case_id, reason="decision failed",
                         actor_id="saga", causation=self.causation())
        with InMemoryUnitOfWork(store) as uow:
            assert service.return_case(uow, cmd)
        assert store.outbox[-1].event_type == "CaseReturned"
        assert dict(store.outbox[-1].payload) == {"reason": "decision failed"}
        view = service.get_case(TENANT, case_id)
        assert (view.status, view.return_reason, view.version) == ("returned", "decision failed", 3)

    def test_request_for_an_open_case_is_invalid(self, service: CaseService,
                                                 store: InMemoryStore) -> None:
        case_id = open_case(service)
        with pytest.raises(InvalidTransition), InMemoryUnitOfWork(store) as uow:
            service.return_case(uow, ReturnCase(tenant_id=TENANT, case_id=case_id, reason="r",
                                                actor_id="saga", causation=Causation()))
        assert store.outbox[-1].event_type == "CaseOpened"
