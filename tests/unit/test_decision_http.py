"""The decision service's HTTP API behind the shared edge (starlette TestClient).

The edge rules of ``GET /decisions/{case_id}``: 401 without / with a bad token, 403 without a
reading role, another tenant's decision -> the same 404 as a missing one, 503 without
details when the store fails.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from services.decision.adapters.http import build_app
from services.decision.domain.decision import Decision
from services.decision.domain.rules import Outcome, Verdict
from tests.unit.problems import EDGE, NO_ROLE_A, OFFICER_A, OFFICER_B, SUPERVISOR_A, problem


def decision(case_id: str, tenant: str) -> Decision:
    return Decision(case_id=case_id, tenant_id=tenant, saga_id="saga-1",
                    verdict=Verdict(outcome=Outcome.VIOLATION, violation_code="REG-4",
                                    penalty_cents=400_000),
                    rules_version="r1", decided_at=datetime(2025, 1, 1, tzinfo=UTC),
                    request_event_id="ev-1")


class Queries:
    def __init__(self, *decisions: Decision) -> None:
        self.rows = {d.case_id: d for d in decisions}
        self.calls: list[str] = []

    def get(self, case_id: str) -> Decision | None:
        self.calls.append(case_id)
        return self.rows.get(case_id)


@pytest.fixture
def client() -> TestClient:
    app = build_app(Queries(decision("case-a", "tenant-a"), decision("case-b", "tenant-b")),
                    edge=EDGE)
    return TestClient(app, raise_server_exceptions=False)


def test_own_decision_is_served(client: TestClient) -> None:
    for headers in (OFFICER_A, SUPERVISOR_A):
        r = client.get("/decisions/case-a", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["outcome"] == "violation" and r.json()["tenant_id"] == "tenant-a"


def test_token_required_and_reading_role_required(client: TestClient) -> None:
    r = client.get("/decisions/case-a")
    problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    problem(client.get("/decisions/case-a", headers={"Authorization": "Bearer x.y.z"}),
            401, "invalid_token")
    problem(client.get("/decisions/case-a", headers=NO_ROLE_A), 403, "forbidden")


def test_another_tenants_decision_is_not_found(client: TestClient) -> None:
    missing = problem(client.get("/decisions/case-zzz", headers=OFFICER_A), 404,
                      "decision_not_found")
    other = problem(client.get("/decisions/case-b", headers=OFFICER_A), 404,
                    "decision_not_found")
    assert other["title"] == missing["title"]
    assert "tenant-b" not in str(other)
    assert client.get("/decisions/case-b", headers=OFFICER_B).status_code == 200


def test_storage_failure_is_a_503_without_details() -> None:
    class Broken:
        def get(self, case_id: str) -> Decision | None:
            raise OSError("connection refused: secret-host:5432")

    client = TestClient(build_app(Broken(), edge=EDGE), raise_server_exceptions=False)
    r = client.get("/decisions/case-a", headers=OFFICER_A)
    problem(r, 503, "service_unavailable")
    assert r.headers["retry-after"] == "1" and "secret-host" not in r.text
