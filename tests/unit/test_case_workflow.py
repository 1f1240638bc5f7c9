"""Unit tests of the regulator's workflow: the case state machine (every action from every
status), its value rules, and the workflow routes over in-memory adapters."""

from __future__ import annotations

import base64
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import EdgePolicy
from services.case.adapters.http.app import build_app
from services.case.adapters.memory import InMemoryStore
from services.case.domain import (
    APPEAL_WINDOW,
    EVIDENCE_MAX_BYTES,
    TRANSITIONS,
    Action,
    Case,
    CaseContent,
    CaseStatus,
    CaseValidationError,
    InvalidTransition,
)
from tests.support.case_app import BODY, memory_case_service

T0 = datetime(2025, 5, 1, tzinfo=UTC)
CONTENT = CaseContent(title="Unlicensed trading", summary="Stall", severity=4, evidence_count=1,
                      reporter_email="party@example.org")


def case_in(status: CaseStatus, **extra: Any) -> Case:
    case = Case(id=str(uuid.uuid4()), tenant_id="t", content=CONTENT, status=status, version=3,
                opened_by="o", opened_at=T0, updated_at=T0, **extra)
    return case


def act(case: Case, action: Action) -> None:
    """Run ``action`` on ``case`` with valid arguments."""
    at = T0 + timedelta(hours=1)
    match action:
        case Action.ASSIGN:
            case.assign(officer_id="officer-7", actor_id="sup", at=at)
        case Action.REQUEST_EVIDENCE:
            case.request_evidence(request_id="r1", description="ledger", due_at=at + timedelta(days=7),
                                  actor_id="o", at=at)
        case Action.SUBMIT_EVIDENCE:
            case.submit_evidence(evidence_id="e1", name="ledger.pdf", media_type="application/pdf",
                                 content=b"%PDF", sha256="0" * 64, actor_id="o", at=at)
        case Action.START_REVIEW:
            case.start_review(actor_id="o", at=at)
        case Action.SUBMIT:
            case.submit(actor_id="o", at=at)
        case Action.WITHDRAW:
            case.withdraw(reason="duplicate", actor_id="o", at=at)
        case Action.CLOSE:
            case.close(outcome="violation", penalty_cents=200, actor_id="saga", at=at)
        case Action.RETURN:
            case.return_(reason="no decision", actor_id="saga", at=at)
        case Action.APPEAL:
            case.appeal(reason="wrong", actor_id="party", at=at)
        case Action.CORRECT_NOTICE:
            case.correct_notice(reason="wrong severity", penalty_cents=100, actor_id="sup", at=at)
        case Action.MARK_OVERDUE:
            case.mark_overdue(grace=timedelta(days=1), actor_id="deadline", at=at)
        case Action.ESCALATE:
            case.escalate(actor_id="deadline", at=at)


def _closed_violation(status: CaseStatus) -> dict[str, Any]:
    from services.case.domain.values import Resolution

    if status is CaseStatus.CLOSED:
        return {"resolution": Resolution.closed("violation", 100), "resolved_at": T0}
    if status is CaseStatus.AWAITING_EVIDENCE:  # overdue since T0, escalation due at T0
        return {"evidence_status": "overdue", "evidence_due_at": T0, "evidence_escalate_at": T0}
    return {}


class TestStateMachine:
    @pytest.mark.parametrize("status", list(CaseStatus))
    @pytest.mark.parametrize("action", list(Action))
    def test_every_action_is_allowed_exactly_where_its_rule_says(
            self, status: CaseStatus, action: Action) -> None:
        rule = TRANSITIONS[action]
        case = case_in(status, **_closed_violation(status))
        if status in rule.allowed:
            act(case, action)
            if action is not Action.MARK_OVERDUE:  # already reminded: a no-op
                assert case.status is (rule.target or status)
        elif (action, status) == (Action.RETURN, CaseStatus.RETURNED):
            act(case, action)  # the saga asking twice: a no-op, not a refusal
            assert case.pending_events == ()
        else:
            with pytest.raises(InvalidTransition) as err:
                act(case, action)
            assert err.value.rule.startswith(rule.name) and err.value.action == action.value
            assert case.status is status and case.pending_events == ()

    def test_the_evidence_path_records_its_facts_in_order(self) -> None:
        case = case_in(CaseStatus.OPEN)
        for action in (Action.ASSIGN, Action.REQUEST_EVIDENCE, Action.SUBMIT_EVIDENCE,
                       Action.SUBMIT):
            act(case, action)
        assert [type(e).__name__ for e in case.pull_events()] == [
            "CaseAssigned", "EvidenceRequested", "EvidenceSubmitted", "CaseSubmitted"]
        assert case.version == 7 and case.evidence_status == "submitted"

    def test_assigning_the_same_officer_again_records_nothing(self) -> None:
        case = case_in(CaseStatus.OPEN)
        assert case.assign(officer_id="a", actor_id="s", at=T0) is True
        assert case.assign(officer_id="a", actor_id="s", at=T0) is False
        assert case.assign(officer_id="b", actor_id="s", at=T0) is True
        events = case.pull_events()
        assert [(e.officer_id, e.previous_officer_id) for e in events] == [("a", None), ("b", "a")]

    def test_a_passed_due_date_is_overdue_at_once(self) -> None:
        case = case_in(CaseStatus.OPEN)
        case.request_evidence(request_id="r", description="x", due_at=T0 - timedelta(days=1),
                              actor_id="o", at=T0)
        assert case.mark_overdue(grace=timedelta(days=1), actor_id="d", at=T0) is True
        with pytest.raises(CaseValidationError) as err:
            case_in(CaseStatus.OPEN).request_evidence(
                request_id="r", description="x", due_at=datetime(2025, 5, 2), actor_id="o", at=T0)
        assert err.value.field == "due_at"

    def test_evidence_larger_than_the_limit_is_refused(self) -> None:
        case = case_in(CaseStatus.AWAITING_EVIDENCE)
        with pytest.raises(CaseValidationError) as err:
            case.submit_evidence(evidence_id="e", name="n", media_type="a/b",
                                 content=b"x" * (EVIDENCE_MAX_BYTES + 1), sha256="0" * 64,
                                 actor_id="o", at=T0)
        assert err.value.field == "content_base64"

    @pytest.mark.parametrize(("extra", "at", "rule"), [
        ({}, T0 + APPEAL_WINDOW + timedelta(seconds=1), "appeal-window"),
        ({"appealed_at": T0}, T0 + timedelta(days=1), "appeal-closed-once"),
    ])
    def test_appeal_rules(self, extra: dict[str, Any], at: datetime, rule: str) -> None:
        case = case_in(CaseStatus.CLOSED, **_closed_violation(CaseStatus.CLOSED), **extra)
        with pytest.raises(InvalidTransition) as err:
            case.appeal(reason="r", actor_id="p", at=at)
        assert err.value.rule.startswith(rule)

    def test_no_violation_cannot_be_appealed(self) -> None:
        from services.case.domain.values import Resolution

        case = case_in(CaseStatus.CLOSED, resolution=Resolution.closed("no_violation", None),
                       resolved_at=T0)
        with pytest.raises(InvalidTransition) as err:
            case.appeal(reason="r", actor_id="p", at=T0)
        assert err.value.rule.startswith("appeal-violation-only")

    def test_an_appealed_case_closes_again_with_the_appeal_decision(self) -> None:
        case = case_in(CaseStatus.CLOSED, **_closed_violation(CaseStatus.CLOSED))
        case.appeal(reason="wrong amount", actor_id="p", at=T0 + timedelta(days=1))
        assert case.close(outcome="no_violation", penalty_cents=None, actor_id="saga",
                          at=T0 + timedelta(days=2)) is True
        assert case.status is CaseStatus.CLOSED
        assert [type(e).__name__ for e in case.pull_events()] == ["AppealSubmitted", "CaseClosed"]


# --- HTTP ------------------------------------------------------------------------------

H = bearer_headers("tenant-a", subject="officer-1")
SUP = bearer_headers("tenant-a", ("supervisor",), subject="sup-1")


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def client(store: InMemoryStore) -> TestClient:
    edge = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
    return TestClient(build_app(memory_case_service(store), edge=edge),
                      raise_server_exceptions=False)


def key(**extra: str) -> dict[str, str]:
    return {**H, "Idempotency-Key": str(uuid.uuid4()), **extra}


def opened(client: TestClient, **overrides: Any) -> str:
    response = client.post("/cases", json={**BODY, **overrides}, headers=H)
    assert response.status_code == 201, response.text
    return response.json()["id"]


class TestWorkflowRoutes:
    def test_evidence_path_over_http(self, client: TestClient, store: InMemoryStore) -> None:
        case_id = opened(client)
        assigned = client.post(f"/cases/{case_id}/assignment", json={"officer_id": "officer-7"},
                               headers={**SUP, "Idempotency-Key": "a1", "If-Match": '"1"'})
        assert assigned.status_code == 200, assigned.text
        assert assigned.json()["officer_id"] == "officer-7" and assigned.headers["etag"] == '"2"'
        due = (datetime(2025, 5, 1, tzinfo=UTC) + timedelta(days=14)).isoformat()
        requested = client.post(f"/cases/{case_id}/evidence-requests",
                                json={"description": "the sales ledger", "due_at": due},
                                headers=key())
        assert requested.json()["status"] == "awaiting_evidence", requested.text
        content = b"%PDF-1.4 ledger"
        submitted = client.post(f"/cases/{case_id}/evidence", headers=key(), json={
            "name": "ledger.pdf", "media_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode()})
        assert submitted.json()["status"] == "under_review", submitted.text
        items = client.get(f"/cases/{case_id}/evidence", headers=H).json()["items"]
        assert [(i["name"], i["size_bytes"], i["sha256"]) for i in items] == [
            ("ledger.pdf", len(content), hashlib.sha256(content).hexdigest())]
        assert [e.event_type for e in store.outbox] == [
            "CaseOpened", "CaseAssigned", "EvidenceRequested", "EvidenceSubmitted"]
        assert store.outbox[2].event_version == 2
        assert store.outbox[2].payload["description"] == "the sales ledger"

    def test_reassigning_the_same_officer_is_200_without_an_event(
            self, client: TestClient, store: InMemoryStore) -> None:
        case_id = opened(client)
        for _ in range(2):
            response = client.post(f"/cases/{case_id}/assignment",
                                   json={"officer_id": "officer-7"}, headers=key())
            assert response.status_code == 200
        assert [e.event_type for e in store.outbox] == ["CaseOpened", "CaseAssigned"]

    def test_refused_transition_is_409_naming_the_rule(self, client: TestClient) -> None:
        case_id = opened(client)
        response = client.post(f"/cases/{case_id}/evidence", headers=key(), json={
            "name": "x.txt", "media_type": "text/plain", "content_base64": "eA=="})
        assert response.status_code == 409
        body = response.json()
        assert body["code"] == "invalid_transition" and "evidence-after-request" in body["detail"]
        assert body["errors"][0]["field"] == "status"

    @pytest.mark.parametrize(("path", "body", "field"), [
        ("assignment", {"officer_id": ""}, "officer_id"),
        ("evidence-requests", {"description": "x", "due_at": "2025-01-01T00:00:00"}, "due_at"),
        ("evidence-requests", {"description": "x", "due_at": "1700000000"}, "due_at"),
        ("evidence-requests", {"description": " ", "due_at": "2030-01-01T00:00:00Z"},
         "description"),
        ("withdrawal", {}, "reason"),
        ("appeal", {"reason": "x", "extra": 1}, "extra"),
    ])
    def test_bad_input_is_400_naming_the_field(self, client: TestClient, path: str,
                                               body: dict[str, Any], field: str) -> None:
        case_id = opened(client)
        response = client.post(f"/cases/{case_id}/{path}", json=body, headers=key())
        assert response.status_code == 400, response.text
        assert field in [e["field"] for e in response.json()["errors"]]

    def test_writes_need_an_idempotency_key_and_honour_if_match(self, client: TestClient) -> None:
        case_id = opened(client)
        missing = client.post(f"/cases/{case_id}/review", headers=H)
        assert missing.status_code == 400 and missing.json()["code"] == "missing_idempotency_key"
        stale = client.post(f"/cases/{case_id}/review", headers=key(**{"If-Match": '"7"'}))
        assert stale.status_code == 412
        started = client.post(f"/cases/{case_id}/review", headers=key(**{"If-Match": '"1"'}))
        assert started.status_code == 200 and started.json()["status"] == "under_review"

    @pytest.mark.parametrize("raw", [b"null", b"[]", b"0"])
    def test_an_optional_body_that_is_not_an_object_is_400(self, client: TestClient,
                                                          raw: bytes) -> None:
        case_id = opened(client)
        response = client.post(f"/cases/{case_id}/review", content=raw,
                               headers=key(**{"Content-Type": "application/json"}))
        assert response.status_code == 400, response.text
        assert response.json()["errors"][0]["field"] == "body"

    def test_a_number_is_no_date_time_in_the_query(self, client: TestClient) -> None:
        response = client.get("/cases", params={"opened_to": "0.5"}, headers=H)
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "opened_to"

    def test_search_filters_and_keyset_pages(self, client: TestClient) -> None:
        ids = [opened(client, severity=1 + i % 2) for i in range(5)]
        client.post(f"/cases/{ids[0]}/assignment", json={"officer_id": "o-9"}, headers=key())
        mine = client.get("/cases", params={"officer_id": "o-9"}, headers=H).json()
        assert [c["id"] for c in mine["items"]] == [ids[0]] and mine["next_after"] is None
        seen, after = [], None
        while True:
            params = {"severity": 1, "limit": 2, **({"after": after} if after else {})}
            page = client.get("/cases", params=params, headers=H).json()
            seen += [c["id"] for c in page["items"]]
            after = page["next_after"]
            if after is None:
                break
        assert sorted(seen) == sorted(ids[0::2])
        bad = client.get("/cases", params={"after": "not-a-case-id"}, headers=H)
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "after"
        unknown = client.get("/cases", params={"after": str(uuid.uuid4())}, headers=H)
        assert unknown.status_code == 404


# --- projections ------------------------------------------------------------------------

def _ev(event_type: str, case_id: str, version: int, **payload: Any) -> Any:
    from casestream.events import Envelope

    return Envelope(event_id=str(uuid.uuid4()), event_type=event_type, event_version=1,
                    source="case", tenant_id="t", aggregate_type="case", aggregate_id=case_id,
                    aggregate_version=version, occurred_at=T0, correlation_id=case_id,
                    actor_id="a", payload=payload)


def test_workload_fold_tracks_officer_openness_and_the_evidence_request() -> None:
    from services.case.adapters.workload import fold

    due = T0 + timedelta(days=3)
    rows = fold([
        _ev("CaseOpened", "A", 1), _ev("CaseAssigned", "A", 2, officer_id="o-1"),
        _ev("EvidenceRequested", "A", 3, due_at=due),
        _ev("CaseOpened", "B", 1), _ev("CaseAssigned", "B", 2, officer_id="o-2"),
        _ev("CaseWithdrawn", "B", 3, reason="dup"), _ev("CaseRetitled", "B", 4),
    ])
    assert rows == [("A", "t", "o-1", True, "requested", due, 3),
                    ("B", "t", "o-2", False, None, None, 3)]


# --- evidence deadlines ------------------------------------------------------------------

def test_overdue_evidence_is_reminded_then_escalated_to_manual_review() -> None:
    from services.case.adapters.memory import InMemoryUnitOfWork
    from services.case.application import CaseService

    class Clock:
        at = T0

        def now(self) -> datetime:
            return self.at

    store, clock = InMemoryStore(), Clock()
    case = case_in(CaseStatus.OPEN, loaded_version=0)
    case.request_evidence(request_id="r", description="ledger", due_at=T0 + timedelta(days=1),
                          actor_id="o", at=T0)
    case.pull_events()
    store.cases[case.id] = case
    service = CaseService(uow=lambda: InMemoryUnitOfWork(store), clock=clock,
                          new_id=lambda: str(uuid.uuid4()), idempotency_ttl=timedelta(hours=1))
    grace = timedelta(days=2)
    assert service.run_evidence_deadlines(grace) == 0  # not due yet
    clock.at = T0 + timedelta(days=1)
    assert service.run_evidence_deadlines(grace) == 1
    assert service.run_evidence_deadlines(grace) == 0  # reminded once
    clock.at = T0 + timedelta(days=3)
    assert service.run_evidence_deadlines(grace) == 1
    assert [e.event_type for e in store.outbox] == ["EvidenceOverdue", "CaseEscalated"]
    assert store.outbox[0].payload["escalate_at"] == T0 + timedelta(days=3)
    # the reminder names the party to mail (EvidenceOverdue v2)
    assert store.outbox[0].event_version == 2
    assert store.outbox[0].payload["recipient_email"] == case.content.reporter_email
    assert store.cases[case.id].status is CaseStatus.MANUAL_REVIEW
    assert service.run_evidence_deadlines(grace) == 0


class TestSupervisorCorrection:
    """``POST /cases/{id}/correction``: supervisor only, a closed violation, problem+json."""

    def closed(self, client: TestClient, store: InMemoryStore, outcome: str = "violation") -> str:
        from services.case.adapters.memory import InMemoryUnitOfWork
        from services.case.application import CloseCase
        from services.case.application.integration import Causation

        case_id = opened(client)
        assert client.post(f"/cases/{case_id}/submit", headers=key()).status_code == 200
        with InMemoryUnitOfWork(store) as uow:
            memory_case_service(store).close_case(uow, CloseCase(
                tenant_id="tenant-a", case_id=case_id, outcome=outcome,
                penalty_cents=40_000 if outcome == "violation" else None, actor_id="saga",
                causation=Causation()))
        return case_id

    def test_supervisor_orders_a_correction_of_a_closed_violation(
            self, client: TestClient, store: InMemoryStore) -> None:
        case_id = self.closed(client, store)
        version = client.get(f"/cases/{case_id}", headers=H).json()["version"]
        headers = {**SUP, "Idempotency-Key": "c1", "If-Match": f'"{version}"'}
        body = {"reason": "the penalty used the wrong severity", "penalty_cents": 10_000}
        response = client.post(f"/cases/{case_id}/correction", json=body, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "closed"
        ordered = store.outbox[-1]
        assert ordered.event_type == "NoticeCorrectionOrdered"
        assert ordered.payload == {"reason": body["reason"], "penalty_cents": 10_000,
                                   "reporter_email": BODY["reporter_email"], "ordered_by": "sup-1"}
        again = client.post(f"/cases/{case_id}/correction", json=body, headers=headers)
        assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
        assert [e.event_type for e in store.outbox].count("NoticeCorrectionOrdered") == 1

    def test_an_officer_may_not_order_a_correction(self, client: TestClient,
                                                   store: InMemoryStore) -> None:
        case_id = self.closed(client, store)
        response = client.post(f"/cases/{case_id}/correction", headers=key(),
                               json={"reason": "x", "penalty_cents": 0})
        assert response.status_code == 403, response.text

    @pytest.mark.parametrize(("body", "field"), [
        ({"reason": "x", "penalty_cents": -1}, "penalty_cents"),
        ({"reason": "x", "penalty_cents": "10"}, "penalty_cents"),
        ({"reason": "x"}, "penalty_cents"),
        ({"reason": " ", "penalty_cents": 0}, "reason"),
        ({"reason": "x", "penalty_cents": 0, "extra": 1}, "extra"),
    ])
    def test_bad_input_is_400_naming_the_field(self, client: TestClient, store: InMemoryStore,
                                               body: dict[str, Any], field: str) -> None:
        case_id = self.closed(client, store)
        response = client.post(f"/cases/{case_id}/correction", json=body,
                               headers={**SUP, "Idempotency-Key": str(uuid.uuid4())})
        assert response.status_code == 400, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert field in [e["field"] for e in response.json()["errors"]]

    @pytest.mark.parametrize("closed_as", [None, "no_violation"])
    def test_no_sent_notice_is_409_naming_the_rule(self, client: TestClient, store: InMemoryStore,
                                                   closed_as: str | None) -> None:
        case_id = opened(client) if closed_as is None else self.closed(client, store, closed_as)
        response = client.post(f"/cases/{case_id}/correction",
                               json={"reason": "x", "penalty_cents": 0},
                               headers={**SUP, "Idempotency-Key": str(uuid.uuid4())})
        assert response.status_code == 409, response.text
        rule = "correction-after-notice" if closed_as is None else "correction-violation-only"
        assert response.json()["code"] == "invalid_transition"
        assert rule in response.json()["detail"]
