"""The notification service's HTTP API behind the shared edge (starlette TestClient).

The edge rules of ``GET /notices/{case_id}`` and ``GET /notices``: 401 without / with a bad
token, 403 without a reading role, another tenant's notice -> the same 404 as a missing
one, the list scoped to the caller's tenant (the tenant is passed to the query, which
filters before its limit), input validation, 503 without details when the store fails.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from services.notification.adapters.http import build_app
from services.notification.domain.notice import Notice, NoticeStatus
from tests.unit.problems import EDGE, NO_ROLE_A, OFFICER_A, OFFICER_B, SUPERVISOR_A, problem

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def notice(case_id: str, tenant: str, *, status: NoticeStatus = NoticeStatus.SENT,
           age_s: int = 0) -> Notice:
    return Notice(case_id=case_id, saga_id="saga-1", tenant_id=tenant, correlation_id=case_id,
                  request_event_id="ev-1", recipient_email="r@example.org",
                  penalty_cents=100, violation_code="REG-1",
                  message_id=f"<{case_id}@notice.casestream>", status=status, attempts=1,
                  next_attempt_at=T0, created_at=T0 - timedelta(seconds=age_s))


class Queries:
    """Mirrors ``PgNoticeQueries``: tenant and status filtered before the limit."""

    def __init__(self, *notices: Notice) -> None:
        self.rows = list(notices)

    def get(self, case_id: str) -> Notice | None:
        return next((n for n in self.rows if n.case_id == case_id), None)

    def list(self, *, tenant_id: str, status: str | None, limit: int) -> list[Notice]:
        out = sorted((n for n in self.rows if n.tenant_id == tenant_id
                      and (status is None or n.status.value == status)),
                     key=lambda n: n.created_at, reverse=True)
        return out[:limit]


@pytest.fixture
def client() -> TestClient:
    # tenant-b's notices are the newest: a filter after the limit would show tenant-a nothing
    rows = [notice("case-a", "tenant-a", age_s=100),
            notice("case-a2", "tenant-a", status=NoticeStatus.FAILED, age_s=90),
            *(notice(f"case-b{i}", "tenant-b", age_s=i) for i in range(5))]
    return TestClient(build_app(Queries(*rows), edge=EDGE), raise_server_exceptions=False)


def test_own_notice_and_list_are_served(client: TestClient) -> None:
    for headers in (OFFICER_A, SUPERVISOR_A):
        r = client.get("/notices/case-a", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["tenant_id"] == "tenant-a" and r.json()["status"] == "sent"
    body = client.get("/notices?limit=2", headers=OFFICER_A).json()
    assert [n["case_id"] for n in body["items"]] == ["case-a2", "case-a"]
    body = client.get("/notices?status=failed", headers=OFFICER_A).json()
    assert [n["case_id"] for n in body["items"]] == ["case-a2"]


@pytest.mark.parametrize("path", ["/notices", "/notices?status=sent", "/notices/case-a"])
def test_token_required_and_reading_role_required(client: TestClient, path: str) -> None:
    r = client.get(path)
    problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    problem(client.get(path, headers={"Authorization": "Bearer x.y.z"}), 401, "invalid_token")
    problem(client.get(path, headers=NO_ROLE_A), 403, "forbidden")


def test_another_tenants_notice_is_not_found_and_never_listed(client: TestClient) -> None:
    missing = problem(client.get("/notices/case-zzz", headers=OFFICER_A), 404,
                      "notice_not_found")
    other = problem(client.get("/notices/case-b0", headers=OFFICER_A), 404, "notice_not_found")
    assert other["title"] == missing["title"]
    assert client.get("/notices/case-b0", headers=OFFICER_B).status_code == 200
    listed = client.get("/notices?limit=1000", headers=OFFICER_A).json()
    assert {n["tenant_id"] for n in listed["items"]} == {"tenant-a"} and listed["count"] == 2
    listed = client.get("/notices", headers=OFFICER_B).json()
    assert {n["tenant_id"] for n in listed["items"]} == {"tenant-b"} and listed["count"] == 5


def test_list_validates_input(client: TestClient) -> None:
    for query, field in [("status=nope", "status"), ("limit=0", "limit"),
                         ("limit=1&limit=2", "limit"), ("stauts=sent", "stauts")]:
        body = problem(client.get(f"/notices?{query}", headers=OFFICER_A), 400,
                       "validation_error")
        assert [e["field"] for e in body["errors"]] == [field], query


def test_the_status_filter_lists_every_notice_status() -> None:
    from typing import get_args

    from services.notification.adapters.http import NoticeListQuery
    from services.notification.domain.notice import NoticeStatus

    allowed = get_args(get_args(NoticeListQuery.model_fields["status"].annotation)[0])
    assert set(allowed) == {s.value for s in NoticeStatus}


def test_storage_failure_is_a_503_without_details() -> None:
    class Broken(Queries):
        def list(self, *, tenant_id: str, status: str | None, limit: int) -> list[Notice]:
            raise OSError("connection refused: secret-host:5432")

    client = TestClient(build_app(Broken(), edge=EDGE), raise_server_exceptions=False)
    r = client.get("/notices", headers=OFFICER_A)
    problem(r, 503, "service_unavailable")
    assert r.headers["retry-after"] == "1" and "secret-host" not in r.text
