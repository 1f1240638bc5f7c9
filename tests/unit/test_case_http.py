"""Unit tests of the case HTTP API over in-memory adapters (starlette TestClient).

Covers the HTTP contract that does not need a database: problem details for
malformed input (field named), required headers, 404/405/413/415/412, idempotent replay
header, ETag, OpenAPI document. Requests carry bearer tokens minted with the development
key (``casestream.auth.tokens.bearer_headers``); auth itself is tested in ``test_http_*.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import BodyLimits, EdgePolicy
from services.case.adapters.http.app import build_app
from services.case.adapters.memory import InMemoryStore
from tests.support.case_app import BODY, memory_case_service

H = bearer_headers("tenant-a", subject="officer-1")
OTHER_TENANT = bearer_headers("tenant-b", subject="officer-9")


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def client(store: InMemoryStore) -> TestClient:
    service = memory_case_service(store)
    edge = EdgePolicy(verifier=TokenVerifier(AuthSettings()), body=BodyLimits(max_bytes=2048))
    return TestClient(build_app(service, edge=edge),
                      raise_server_exceptions=False)


def open_case(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post("/cases", json={**BODY, **overrides}, headers=H)
    assert response.status_code == 201, response.text
    return response.json()


def assert_problem(response: Any, status: int, code: str, field: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["type"] == f"urn:casestream:problem:{code}"
    assert body["title"] and body["detail"]
    if field is not None:
        assert field in [e["field"] for e in body["errors"]], body
    assert "Traceback" not in response.text
    return body


class TestOpen:
    def test_created(self, client: TestClient, store: InMemoryStore) -> None:
        response = client.post("/cases", json=BODY, headers=H)
        assert response.status_code == 201
        body = response.json()
        assert body["status"] == "open" and body["version"] == 1 and body["priority"] == "NORMAL"
        assert body["tenant_id"] == "tenant-a" and body["opened_by"] == "officer-1"
        assert response.headers["location"] == f"/cases/{body['id']}"
        assert response.headers["etag"] == '"1"'
        assert [e.event_type for e in store.outbox] == ["CaseOpened"]

    def test_actor_and_tenant_come_from_the_token(self, client: TestClient) -> None:
        response = client.post("/cases", json=BODY, headers={
            **bearer_headers("t", subject="alice"), "X-Tenant-Id": "tenant-a",
            "X-Actor-Id": "mallory"})
        assert response.status_code == 201
        assert response.json()["opened_by"] == "alice" and response.json()["tenant_id"] == "t"

    @pytest.mark.parametrize(("change", "field"), [
        ({"title": ""}, "title"),
        ({"title": 42}, "title"),
        ({"summary": "s" * 501}, "summary"),
        ({"severity": 0}, "severity"),
        ({"severity": 6}, "severity"),
        ({"severity": "3"}, "severity"),
        ({"severity": 2.5}, "severity"),
        ({"severity": True}, "severity"),
        ({"evidence_count": -1}, "evidence_count"),
        ({"evidence_count": None}, "evidence_count"),
        ({"reporter_email": "nobody"}, "reporter_email"),
        ({"priority": "URGENT"}, "priority"),
        ({"priority": "low"}, "priority"),
        ({"colour": "red"}, "colour"),
    ])
    def test_invalid_field_is_named(self, client: TestClient, store: InMemoryStore,
                                    change: dict[str, Any], field: str) -> None:
        response = client.post("/cases", json={**BODY, **change}, headers=H)
        assert_problem(response, 400, "validation_error", field)
        assert store.outbox == []

    @pytest.mark.parametrize("missing", ["title", "summary", "severity", "evidence_count",
                                         "reporter_email"])
    def test_missing_field_is_named(self, client: TestClient, missing: str) -> None:
        body = {k: v for k, v in BODY.items() if k != missing}
        problem = assert_problem(client.post("/cases", json=body, headers=H), 400,
                                 "validation_error", missing)
        assert problem["errors"][0]["message"] == "field required"

    @pytest.mark.parametrize("raw", [b"{", b'{"title": }', b"nul", b'{"a": NaN}', b"\xff\xfe"])
    def test_malformed_json(self, client: TestClient, raw: bytes) -> None:
        response = client.post("/cases", content=raw,
                               headers={**H, "Content-Type": "application/json"})
        assert_problem(response, 400, "malformed_json", "body")

    @pytest.mark.parametrize("raw", [b"[]", b'"text"', b"3"])
    def test_body_must_be_an_object(self, client: TestClient, raw: bytes) -> None:
        response = client.post("/cases", content=raw,
                               headers={**H, "Content-Type": "application/json"})
        assert_problem(response, 400, "validation_error", "body")

    def test_empty_body(self, client: TestClient) -> None:
        assert_problem(client.post("/cases", headers=H), 400, "validation_error", "body")

    def test_no_token(self, client: TestClient, store: InMemoryStore) -> None:
        response = client.post("/cases", json=BODY, headers={"X-Tenant-Id": "tenant-a"})
        assert_problem(response, 401, "unauthorized")
        assert store.outbox == []

    def test_wrong_content_type(self, client: TestClient) -> None:
        response = client.post("/cases", content=b"title=x", headers={
            **H, "Content-Type": "application/x-www-form-urlencoded"})
        assert_problem(response, 415, "unsupported_media_type")

    def test_too_large(self, client: TestClient) -> None:
        response = client.post("/cases", json={**BODY, "summary": "x" * 4000}, headers=H)
        assert_problem(response, 413, "payload_too_large")

    def test_same_open_key_replays(self, client: TestClient, store: InMemoryStore) -> None:
        headers = {**H, "Idempotency-Key": "open-1"}
        first = client.post("/cases", json=BODY, headers=headers)
        second = client.post("/cases", json=BODY, headers=headers)
        assert first.status_code == second.status_code == 201
        assert second.json() == first.json() and second.headers["idempotent-replayed"] == "true"
        assert "idempotent-replayed" not in first.headers
        assert len(store.cases) == 1


class TestSubmit:
    def test_requires_idempotency_key(self, client: TestClient, store: InMemoryStore) -> None:
        case = open_case(client)
        response = client.post(f"/cases/{case['id']}/submit", json={}, headers=H)
        assert_problem(response, 400, "missing_idempotency_key", "Idempotency-Key")
        assert [e.event_type for e in store.outbox] == ["CaseOpened"]

    def test_submit_and_replay(self, client: TestClient, store: InMemoryStore) -> None:
        case = open_case(client)
        headers = {**H, "Idempotency-Key": "k-1"}
        first = client.post(f"/cases/{case['id']}/submit", json={}, headers=headers)
        assert first.status_code == 200 and first.json()["status"] == "submitted"
        assert first.json()["version"] == 2 and first.headers["etag"] == '"2"'
        # an empty body and {} are the same request
        again = client.post(f"/cases/{case['id']}/submit", headers=headers)
        assert again.status_code == 200 and again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true" and again.headers["etag"] == '"2"'
        assert [e.event_type for e in store.outbox] == ["CaseOpened", "CaseSubmitted"]

    def test_same_key_different_body(self, client: TestClient) -> None:
        case = open_case(client)
        headers = {**H, "Idempotency-Key": "k-1"}
        client.post(f"/cases/{case['id']}/submit", json={"note": "a"}, headers=headers)
        response = client.post(f"/cases/{case['id']}/submit", json={"note": "b"}, headers=headers)
        assert_problem(response, 409, "idempotency_conflict")

    def test_submitting_a_submitted_case_with_a_new_key(self, client: TestClient) -> None:
        case = open_case(client)
        client.post(f"/cases/{case['id']}/submit", headers={**H, "Idempotency-Key": "k-1"})
        response = client.post(f"/cases/{case['id']}/submit",
                               headers={**H, "Idempotency-Key": "k-2"})
        assert_problem(response, 409, "invalid_transition")

    def test_if_match(self, client: TestClient) -> None:
        case = open_case(client)
        url = f"/cases/{case['id']}/submit"
        stale = client.post(url, headers={**H, "Idempotency-Key": "k", "If-Match": '"5"'})
        assert_problem(stale, 412, "precondition_failed")
        # RFC 9110 §13.1.1: no strong ETag of the current version -> the precondition fails
        for no_match in ("yesterday", 'W/"1"', '"2", "3"'):
            bad = client.post(url, headers={**H, "Idempotency-Key": "k", "If-Match": no_match})
            assert_problem(bad, 412, "precondition_failed")
        ok = client.post(url, headers={**H, "Idempotency-Key": "k", "If-Match": '"7", "1"'})
        assert ok.status_code == 200

    @pytest.mark.parametrize("tag", ['"01"', '"001"', '"+1"', '"1 "', '" 1"'])
    def test_if_match_compares_etags_as_exact_strings(self, client: TestClient, tag: str) -> None:
        # RFC 9110 §8.8.3: entity tags are opaque strings; "01" is not the ETag "1"
        case = open_case(client)
        url = f"/cases/{case['id']}/submit"
        refused = client.post(url, headers={**H, "Idempotency-Key": "k", "If-Match": tag})
        assert_problem(refused, 412, "precondition_failed")

    @pytest.mark.parametrize("raw", [b"null", b" null\n"])
    def test_a_null_body_is_refused_naming_the_body(self, client: TestClient,
                                                    store: InMemoryStore, raw: bytes) -> None:
        case = open_case(client)
        response = client.post(f"/cases/{case['id']}/submit", content=raw,
                               headers={**H, "Idempotency-Key": "k",
                                        "Content-Type": "application/json"})
        assert_problem(response, 400, "validation_error", "body")
        assert [e.event_type for e in store.outbox] == ["CaseOpened"]

    def test_unknown_and_malformed_case_ids(self, client: TestClient) -> None:
        headers = {**H, "Idempotency-Key": "k"}
        assert_problem(client.post(f"/cases/{uuid.uuid4()}/submit", headers=headers), 404,
                       "case_not_found")
        assert_problem(client.post("/cases/not-a-uuid/submit", headers=headers), 404,
                       "case_not_found")

    def test_other_tenant_cannot_submit(self, client: TestClient) -> None:
        case = open_case(client)
        response = client.post(f"/cases/{case['id']}/submit",
                               headers={**OTHER_TENANT, "Idempotency-Key": "k"})
        assert_problem(response, 404, "case_not_found")

    def test_unknown_field_in_submit_body(self, client: TestClient) -> None:
        case = open_case(client)
        response = client.post(f"/cases/{case['id']}/submit", json={"notes": "x"},
                               headers={**H, "Idempotency-Key": "k"})
        assert_problem(response, 400, "validation_error", "notes")


class TestRead:
    def test_get_is_tenant_scoped(self, client: TestClient) -> None:
        case = open_case(client)
        mine = client.get(f"/cases/{case['id']}", headers=H)
        assert mine.status_code == 200 and mine.json() == case and mine.headers["etag"] == '"1"'
        assert_problem(client.get(f"/cases/{case['id']}", headers=OTHER_TENANT),
                       404, "case_not_found")
        assert_problem(client.get(f"/cases/{case['id']}"), 401, "unauthorized")

    def test_unknown_route_and_method(self, client: TestClient) -> None:
        assert_problem(client.get("/nothing", headers=H), 404, "not_found")
        response = client.delete(f"/cases/{uuid.uuid4()}", headers=H)
        assert_problem(response, 405, "method_not_allowed")
        assert "GET" in response.headers["allow"]

    def test_openapi_document_describes_the_routes(self, client: TestClient) -> None:
        doc = client.get("/openapi.json").json()
        assert doc["openapi"].startswith("3.1")
        assert set(doc["paths"]) == {"/cases", "/cases/{case_id}", "/cases/{case_id}/submit"} | {
            f"/cases/{{case_id}}/{p}" for p in ("assignment", "evidence-requests", "evidence",
                                                "review", "withdrawal", "appeal", "correction")}
        props = doc["components"]["schemas"]["OpenCaseBody"]["properties"]
        assert props["severity"]["minimum"] == 1 and props["severity"]["maximum"] == 5
        assert doc["components"]["schemas"]["OpenCaseBody"]["additionalProperties"] is False
