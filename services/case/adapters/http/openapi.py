"""The OpenAPI 3.1 document of the case API, built from the request models.

Request schemas come from the pydantic models and the header patterns from
``requests.py`` (so they cannot drift from validation); the case and problem schemas are
written here next to the routes they describe. Every status an operation can answer is
listed, with the headers that always come with it; a schemathesis run against the live
service checks this (``tests/integration/test_schemathesis_case.py``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from casestream.http import (
    KEY_PATTERN,
    PROBLEM_SCHEMA,
    RATE_LIMITED_SCHEMA,
    REPLAYED_HEADER,
    RETRY_AFTER,
    problem_answer,
    query_parameters,
)
from services.case.adapters.http.models import OpenCaseBody, SubmitCaseBody
from services.case.adapters.http.workflow import (
    AssignBody,
    CaseSearchQuery,
    EmptyBody,
    EvidenceBody,
    EvidenceRequestBody,
    ReasonBody,
    CorrectionBody,
)
from services.case.domain.values import CaseStatus

REPLAYED = REPLAYED_HEADER

_TS = {"type": "string", "format": "date-time"}
_NULL_STR = {"type": ["string", "null"]}

CASE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "tenant_id", "status", "version", "title", "summary", "severity",
                 "evidence_count", "reporter_email", "priority", "opened_by", "opened_at",
                 "updated_at"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "tenant_id": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in CaseStatus]},
        "version": {"type": "integer", "minimum": 1},
        "title": {"type": "string"},
        "summary": {"type": "string"},
        "severity": {"type": "integer", "minimum": 1, "maximum": 5},
        "evidence_count": {"type": "integer", "minimum": 0},
        "reporter_email": {"type": "string"},
        "priority": {"type": "string", "enum": ["LOW", "NORMAL", "HIGH"]},
        "opened_by": {"type": "string"},
        "opened_at": _TS,
        "updated_at": _TS,
        "submitted_by": _NULL_STR,
        "submitted_at": {"type": ["string", "null"], "format": "date-time"},
        "note": _NULL_STR,
        "outcome": {"type": ["string", "null"], "enum": ["violation", "no_violation", None]},
        "penalty_cents": {"type": ["integer", "null"], "minimum": 0},
        "return_reason": _NULL_STR,
        "resolved_at": {"type": ["string", "null"], "format": "date-time"},
        "officer_id": _NULL_STR,
        "evidence_status": {"type": "string", "enum": ["none", "requested", "overdue", "submitted"]},
        "evidence_due_at": {"type": ["string", "null"], "format": "date-time"},
        "evidence_description": _NULL_STR,
        "review_started_at": {"type": ["string", "null"], "format": "date-time"},
        "withdraw_reason": _NULL_STR,
        "appeal_reason": _NULL_STR,
        "appealed_at": {"type": ["string", "null"], "format": "date-time"},
    },
}

EVIDENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "case_id", "name", "media_type", "size_bytes", "sha256", "submitted_by",
                 "submitted_at"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "case_id": {"type": "string", "format": "uuid"},
        "request_id": {"type": ["string", "null"]},
        "name": {"type": "string"},
        "media_type": {"type": "string"},
        "size_bytes": {"type": "integer", "minimum": 1},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "submitted_by": {"type": "string"},
        "submitted_at": _TS,
    },
}

_RETRY_AFTER = RETRY_AFTER


_problem = problem_answer


def _case(description: str, *, location: bool = False, replayable: bool = False,
          links: dict[str, Any] | None = None) -> dict[str, Any]:
    headers: dict[str, Any] = {"ETag": {"description": "The case version, quoted.",
                                        "required": True, "schema": {"type": "string"}}}
    if location:
        headers["Location"] = {"description": "URL of the new case.", "required": True,
                               "schema": {"type": "string"}}
    if replayable:
        headers[REPLAYED] = {"description": "true when this is the stored response of an earlier "
                                            "request with the same Idempotency-Key.",
                             "required": False, "schema": {"type": "string", "enum": ["true"]}}
    out: dict[str, Any] = {"description": description, "headers": headers, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Case"}}}}
    if links:
        out["links"] = links
    return out


def _common() -> dict[str, Any]:
    """Answers every authenticated operation may give (shared edge, storage)."""
    return {
        "401": _problem("No, malformed, expired or otherwise invalid bearer token", headers={
            "WWW-Authenticate": {"required": True, "schema": {"type": "string"}}}),
        "403": _problem("The token has no role allowed for this operation", headers={
            "WWW-Authenticate": {"required": True, "schema": {"type": "string"}}}),
        "429": _problem("Rate limit of the tenant or client exceeded",
                        headers={"Retry-After": _RETRY_AFTER}, schema="RateLimited"),
        "503": _problem("Overloaded (in-flight limit), storage unavailable, or the request "
                        "deadline passed; retry later", headers={"Retry-After": _RETRY_AFTER}),
    }


_CASE_ID = {"name": "case_id", "in": "path", "required": True,
            "schema": {"type": "string", "format": "uuid"}}
_TRACEPARENT = {"name": "traceparent", "in": "header", "required": False,
                "description": "W3C trace context; ignored when malformed.",
                "schema": {"type": "string"}}
_IF_MATCH = {"name": "If-Match", "in": "header", "required": False,
             "description": 'ETag(s) of the case version expected ("3"), or *; RFC 9110 '
                            "strong comparison: no match is 412.",
             "schema": {"type": "string"}}


def _key(required: bool) -> dict[str, Any]:
    return {"name": "Idempotency-Key", "in": "header", "required": required,
            "description": "Unique per intended request; a retry with the same key and body "
                           "gets the stored response (Idempotent-Replayed: true).",
            "schema": {"type": "string", "pattern": KEY_PATTERN}}


_CASE_LINKS = {
    "GetCase": {"operationId": "getCase", "parameters": {"case_id": "$response.body#/id"}},
    "SubmitCase": {"operationId": "submitCase", "parameters": {"case_id": "$response.body#/id"}},
    **{name: {"operationId": op, "parameters": {"case_id": "$response.body#/id"}}
       for name, op in (("AssignOfficer", "assignOfficer"), ("RequestEvidence", "requestEvidence"),
                        ("SubmitEvidence", "submitEvidence"), ("ListEvidence", "listEvidence"),
                        ("StartReview", "startReview"), ("WithdrawCase", "withdrawCase"),
                        ("AppealCase", "appealCase"), ("CorrectNotice", "correctNotice"))},
}


def _workflow_write(operation_id: str, summary: str, body: type[Any], *,
                    body_required: bool = True) -> dict[str, Any]:
    return {"post": {
        "operationId": operation_id, "summary": summary,
        "parameters": [_CASE_ID, _key(True), _IF_MATCH, _TRACEPARENT],
        "requestBody": {"required": body_required, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body.__name__}"}}}},
        "responses": {
            "200": _case("The case after the action (or the stored response, replayed)",
                         replayable=True),
            "400": _problem("Invalid input (field named in errors) or malformed JSON"),
            "404": _problem("No such case for this tenant"),
            "409": _problem("The case's status does not allow this action (invalid_transition, "
                            "the rule named in detail and errors), Idempotency-Key conflict or "
                            "in flight, or concurrent modification"),
            "412": _problem("If-Match does not match the case version"),
            "408": _problem("The body did not arrive within the read timeout"),
            "413": _problem("Body too large"),
            "415": _problem("Body is not JSON"), **_common()},
    }}


def workflow_paths() -> dict[str, Any]:
    """The paths of the workflow routes (``workflow.py``)."""
    return {
        "/cases/{case_id}/assignment": _workflow_write(
            "assignOfficer", "Assign an officer (role officer or supervisor); the same officer "
                             "again changes nothing", AssignBody),
        "/cases/{case_id}/evidence-requests": _workflow_write(
            "requestEvidence", "Request evidence by a due date (role officer)",
            EvidenceRequestBody),
        "/cases/{case_id}/evidence": {**_workflow_write(
            "submitEvidence", "Submit an evidence item (role officer)", EvidenceBody),
            "get": {"operationId": "listEvidence",
                    "summary": "The case's evidence items, metadata and SHA-256 (role officer "
                               "or supervisor)",
                    "parameters": [_CASE_ID],
                    "responses": {"200": {"description": "The items, oldest first", "content": {
                        "application/json": {"schema": {
                            "type": "object", "required": ["items"], "properties": {"items": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Evidence"}}}}}}},
                        "404": _problem("No such case for this tenant"), **_common()}}},
        "/cases/{case_id}/review": _workflow_write(
            "startReview", "Start reviewing an open case (role officer)", EmptyBody,
            body_required=False),
        "/cases/{case_id}/withdrawal": _workflow_write(
            "withdrawCase", "Withdraw a case before its decision (role officer)", ReasonBody),
        "/cases/{case_id}/appeal": _workflow_write(
            "appealCase", "Appeal a closed violation within the appeal window (role officer)",
            ReasonBody),
        "/cases/{case_id}/correction": _workflow_write(
            "correctNotice", "Correct the sent notice of a closed violation by a correction "
                             "notice (role supervisor; the notice stays on record)",
            CorrectionBody),
    }


def _search() -> dict[str, Any]:
    return {"get": {
        "operationId": "searchCases",
        "summary": "Search the tenant's cases, oldest opened first (role officer or supervisor)",
        "parameters": query_parameters(CaseSearchQuery),
        "responses": {"200": {"description": "One page; next_after is null on the last", "content": {
            "application/json": {"schema": {
                "type": "object", "required": ["items", "next_after"], "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/Case"}},
                    "next_after": {"type": ["string", "null"], "format": "uuid"}}}}}},
            "400": _problem("Invalid query parameter (named in errors)"),
            "404": _problem("after names no case of this tenant"), **_common()},
    }}


@cache
def openapi_document() -> dict[str, Any]:
    """Return the OpenAPI 3.1 document (built once)."""
    bad = _problem("Invalid input (field named in errors) or malformed JSON")
    in_flight = _problem("Idempotency-Key reused for a different request "
                         "(idempotency_conflict) or still in flight (request_in_flight)")
    return {
        "openapi": "3.1.0",
        "info": {"title": "casestream case service", "version": "1.0.0",
                 "description": "Bearer JWT with claims tenant, roles (officer, supervisor), "
                                "sub. Data of other tenants is never visible (404)."},
        "security": [{"bearerAuth": []}],
        "paths": {
            "/cases": {**_search(), "post": {
                "operationId": "openCase",
                "summary": "Open a case (role officer)",
                "parameters": [_key(False), _TRACEPARENT],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/OpenCaseBody"}}}},
                "responses": {"201": _case("Case opened (or the stored response, replayed)",
                                           location=True, replayable=True, links=_CASE_LINKS),
                              "400": bad, "409": in_flight,
                              "408": _problem("The body did not arrive within the read "
                                              "timeout"),
                              "413": _problem("Body too large"),
                              "415": _problem("Body is not JSON"), **_common()},
            }},
            "/cases/{case_id}": {"get": {
                "operationId": "getCase",
                "summary": "Read a case (role officer or supervisor)",
                "parameters": [_CASE_ID],
                "responses": {"200": _case("The case"),
                              "404": _problem("No such case for this tenant"), **_common()},
            }},
            "/cases/{case_id}/submit": {"post": {
                "operationId": "submitCase",
                "summary": "Submit an open case (role officer)",
                "parameters": [_CASE_ID, _key(True), _IF_MATCH, _TRACEPARENT],
                "requestBody": {"required": False, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/SubmitCaseBody"}}}},
                "responses": {"200": _case("Case submitted (or the stored response, replayed)",
                                           replayable=True),
                              "400": bad, "404": _problem("No such case for this tenant"),
                              "409": _problem("Case not open, Idempotency-Key conflict or in "
                                              "flight, or concurrent modification"),
                              "412": _problem("If-Match does not match the case version"),
                              "408": _problem("The body did not arrive within the read "
                                              "timeout"),
                              "413": _problem("Body too large"),
                              "415": _problem("Body is not JSON"), **_common()},
            }},
            **workflow_paths(),
        },
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                               "bearerFormat": "JWT"}},
            "schemas": {
                "OpenCaseBody": OpenCaseBody.model_json_schema(),
                "SubmitCaseBody": SubmitCaseBody.model_json_schema(),
                "Case": CASE_SCHEMA,
                "Evidence": EVIDENCE_SCHEMA,
                **{m.__name__: m.model_json_schema() for m in (
                    AssignBody, EvidenceRequestBody, EvidenceBody, ReasonBody, CorrectionBody, EmptyBody)},
                "Problem": PROBLEM_SCHEMA,
                "RateLimited": RATE_LIMITED_SCHEMA,
            },
        },
    }
