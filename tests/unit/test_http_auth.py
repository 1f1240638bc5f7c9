"""Authentication, roles and tenant isolation at the HTTP edge (starlette TestClient).

The case and audit apps over in-memory adapters: 401 without / with a bad token (RFC 6750
``WWW-Authenticate``), 403 for a wrong role, 404 for another tenant's case on every read
and write route, public probe and OpenAPI paths, counters.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers, mint_token
from casestream.http import EdgePolicy, edge_middleware, principal_of, requires
from services.audit.adapters.http import build_app as build_audit_app
from services.audit.application import CaseTimeline, TimelineEvent
from services.case.adapters.http.app import build_app
from services.case.adapters.memory import InMemoryStore
from tests.support.case_app import BODY, assert_reads_but_cannot_write, memory_case_service

SETTINGS = AuthSettings()
EDGE = EdgePolicy(verifier=TokenVerifier(SETTINGS))
OFFICER_A = bearer_headers("tenant-a", subject="officer-a")
OFFICER_B = bearer_headers("tenant-b", subject="officer-b")
SUPERVISOR_A = bearer_headers("tenant-a", ("supervisor",), subject="sup-a")
NO_ROLE_A = bearer_headers("tenant-a", (), subject="nobody")


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def client(store: InMemoryStore) -> Iterator[TestClient]:
    service = memory_case_service(store)
    with TestClient(build_app(service, edge=EDGE), raise_server_exceptions=False) as c:
        yield c


def opened(client: TestClient, headers: dict[str, str] = OFFICER_A) -> str:
    response = client.post("/cases", json=BODY, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == status and body["detail"]
    return body


def token(**overrides: Any) -> dict[str, str]:
    args: dict[str, Any] = dict(tenant="tenant-a", roles=["officer"], subject="x",
                                key=SETTINGS.jwt_key, issuer=SETTINGS.jwt_issuer,
                                audience=SETTINGS.jwt_audience)
    args.update(overrides)
    return {"Authorization": f"Bearer {mint_token(**args)}"}


class OneTimeline:
    """``TimelineReader`` knowing one case of one tenant."""

    def __init__(self, tenant_id: str, case_id: str) -> None:
        self.tenant_id, self.case_id = tenant_id, case_id

    def timeline(self, tenant_id: str, case_id: str) -> CaseTimeline | None:
        if (tenant_id, case_id) != (self.tenant_id, self.case_id):
            return None
        at = datetime(2025, 5, 1, tzinfo=UTC)
        event = TimelineEvent(event_id=str(uuid.uuid4()), event_type="CaseOpened",
                              event_version=3, aggregate_type="case", aggregate_version=1,
                              occurred_at=at, published_at=at, source="case", summary="opened")
        return CaseTimeline(case_id=case_id, tenant_id=tenant_id, events=(event,),
                            case_last_applied_at=at, projection_last_applied_at=at)


ROUTES = [("post", "/cases"), ("get", f"/cases/{uuid.UUID(int=1)}"),
          ("post", f"/cases/{uuid.UUID(int=1)}/submit")]


class TestUnauthenticated:
    @pytest.mark.parametrize(("method", "path"), ROUTES)
    def test_no_token_is_401_with_a_bare_challenge(self, client: TestClient, store: InMemoryStore,
                                                   method: str, path: str) -> None:
        response = client.request(method, path, json=BODY, headers={"Idempotency-Key": "k"})
        problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == 'Bearer realm="casestream"'
        assert store.outbox == [] and store.records == {}

    @pytest.mark.parametrize(("headers", "reason"), [
        ({"Authorization": "Bearer not.a.jwt"}, "token malformed"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "authorization scheme must be Bearer"),
        ({"Authorization": "Bearer"}, "bearer token malformed"),
        ({"Authorization": "Bearer a b"}, "bearer token malformed"),
        (token(key="z" * 40), "token signature invalid"),
        (token(now=time.time() - 7200, ttl_s=60), "token expired"),
        (token(audience="someone-else"), "token audience not accepted"),
        (token(issuer="someone-else"), "token issuer not accepted"),
        (token(extra={"tenant": None}), "tenant"),
    ])
    def test_invalid_token_is_401_invalid_token(self, client: TestClient, store: InMemoryStore,
                                                headers: dict[str, str], reason: str) -> None:
        response = client.post("/cases", json=BODY, headers=headers)
        body = problem(response, 401, "invalid_token")
        assert reason in body["detail"]
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="casestream", error="invalid_token"')
        assert store.outbox == []
        assert client.app.state.counters.edge.unauthorized == 1  # type: ignore[attr-defined]

    def test_public_paths_need_no_token(self, client: TestClient) -> None:
        assert client.get("/openapi.json").status_code == 200

    def test_tenant_and_actor_headers_are_ignored(self, client: TestClient) -> None:
        response = client.get(f"/cases/{uuid.uuid4()}",
                              headers={"X-Tenant-Id": "tenant-a", "X-Actor-Id": "a"})
        problem(response, 401, "unauthorized")


class TestRoles:
    def test_supervisor_reads_but_does_not_open_or_submit(self, client: TestClient,
                                                          store: InMemoryStore) -> None:
        case_id = opened(client)
        assert_reads_but_cannot_write(client, case_id, SUPERVISOR_A, BODY, problem)
        assert [e.event_type for e in store.outbox] == ["CaseOpened"]

    def test_token_without_roles_can_do_nothing(self, client: TestClient) -> None:
        case_id = opened(client)
        problem(client.get(f"/cases/{case_id}", headers=NO_ROLE_A), 403, "forbidden")
        problem(client.post("/cases", json=BODY, headers=NO_ROLE_A), 403, "forbidden")

    def test_unknown_roles_grant_nothing(self, client: TestClient) -> None:
        problem(client.post("/cases", json=BODY, headers=token(roles=["admin", "root"])), 403,
                "forbidden")

    def test_requires_decorator(self) -> None:
        @requires("supervisor")
        async def resolve(request: Request) -> JSONResponse:
            return JSONResponse({"by": principal_of(request).subject})

        app = Starlette(routes=[Route("/resolve", resolve, methods=["POST"])],
                        middleware=edge_middleware(EDGE))
        with TestClient(app) as c:
            assert c.post("/resolve", headers=SUPERVISOR_A).json() == {"by": "sup-a"}
            problem(c.post("/resolve", headers=OFFICER_A), 403, "forbidden")
            problem(c.post("/resolve"), 401, "unauthorized")


class TestTenantIsolation:
    """Another tenant's case is 404 on every route, exactly like a case that does not exist."""

    def test_read(self, client: TestClient) -> None:
        case_id = opened(client)
        theirs = problem(client.get(f"/cases/{case_id}", headers=OFFICER_B), 404,
                         "case_not_found")
        missing = problem(client.get(f"/cases/{uuid.uuid4()}", headers=OFFICER_B), 404,
                          "case_not_found")
        assert set(theirs) == set(missing) and theirs["title"] == missing["title"]

    def test_submit(self, client: TestClient, store: InMemoryStore) -> None:
        case_id = opened(client)
        problem(client.post(f"/cases/{case_id}/submit", json={},
                            headers={**OFFICER_B, "Idempotency-Key": "k"}), 404, "case_not_found")
        problem(client.post(f"/cases/{case_id}/submit", json={},
                            headers={**OFFICER_B, "Idempotency-Key": "k", "If-Match": '"1"'}),
                404, "case_not_found")
        assert [e.event_type for e in store.outbox] == ["CaseOpened"]
        # the owner still can
        ok = client.post(f"/cases/{case_id}/submit", json={},
                         headers={**OFFICER_A, "Idempotency-Key": "k"})
        assert ok.status_code == 200 and "idempotent-replayed" not in ok.headers

    def test_same_key_in_another_tenant_never_replays(self, client: TestClient) -> None:
        first = client.post("/cases", json=BODY, headers={**OFFICER_A, "Idempotency-Key": "k"})
        other = client.post("/cases", json=BODY, headers={**OFFICER_B, "Idempotency-Key": "k"})
        assert first.status_code == other.status_code == 201
        assert "idempotent-replayed" not in other.headers
        assert other.json()["tenant_id"] == "tenant-b" and other.json()["id"] != first.json()["id"]

    def test_audit_timeline(self) -> None:
        case_id = str(uuid.uuid4())
        with TestClient(build_audit_app(OneTimeline("tenant-a", case_id), edge=EDGE)) as c:
            assert c.get(f"/audit/cases/{case_id}", headers=OFFICER_A).status_code == 200
            assert c.get(f"/audit/cases/{case_id}", headers=SUPERVISOR_A).status_code == 200
            theirs = problem(c.get(f"/audit/cases/{case_id}", headers=OFFICER_B), 404,
                             "case_not_found")
            assert case_id not in str(theirs.get("errors"))
            problem(c.get(f"/audit/cases/{case_id}", headers=NO_ROLE_A), 403, "forbidden")
            problem(c.get(f"/audit/cases/{case_id}"), 401, "unauthorized")
            problem(c.get("/audit/cases/a%00b", headers=OFFICER_A), 404, "case_not_found")
