"""The OpenAPI 3.1 document of the case API, built from the request models.

Request schemas come from the pydantic models (so they cannot drift from validation);
the case and problem schemas are written here next to the routes they describe.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from services.case.adapters.http.models import OpenCaseBody, SubmitCaseBody

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
        "status": {"type": "string", "enum": ["open", "submitted", "closed", "returned"]},
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
    },
}

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code", "errors"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {"type": "array", "items": {
            "type": "object", "required": ["field", "message"],
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}},
    },
}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {
        "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def _case(description: str) -> dict[str, Any]:
    return {"description": description,
            "headers": {"ETag": {"schema": {"type": "string"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Case"}}}}


_TENANT = {"name": "X-Tenant-Id", "in": "header", "required": True,
           "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$"}}
_ACTOR = {"name": "X-Actor-Id", "in": "header", "required": False,
          "schema": {"type": "string", "maxLength": 128}}
_CASE_ID = {"name": "case_id", "in": "path", "required": True,
            "schema": {"type": "string", "format": "uuid"}}


def _key(required: bool) -> dict[str, Any]:
    return {"name": "Idempotency-Key", "in": "header", "required": required,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255}}


@cache
def openapi_document() -> dict[str, Any]:
    """Return the OpenAPI 3.1 document (built once)."""
    bad = _problem("Invalid input (field named in errors), malformed JSON, or missing header")
    return {
        "openapi": "3.1.0",
        "info": {"title": "casestream case service", "version": "1.0.0"},
        "paths": {
            "/cases": {"post": {
                "operationId": "openCase",
                "parameters": [_TENANT, _ACTOR, _key(False)],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/OpenCaseBody"}}}},
                "responses": {"201": _case("Case opened"), "400": bad,
                              "409": _problem("Idempotency conflict or request in flight"),
                              "413": _problem("Body too large"),
                              "415": _problem("Not JSON")},
            }},
            "/cases/{case_id}": {"get": {
                "operationId": "getCase",
                "parameters": [_CASE_ID, _TENANT],
                "responses": {"200": _case("The case"), "400": bad,
                              "404": _problem("No such case for this tenant")},
            }},
            "/cases/{case_id}/submit": {"post": {
                "operationId": "submitCase",
                "parameters": [_CASE_ID, _TENANT, _ACTOR, _key(True),
                               {"name": "If-Match", "in": "header", "required": False,
                                "schema": {"type": "string"}}],
                "requestBody": {"required": False, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/SubmitCaseBody"}}}},
                "responses": {"200": _case("Case submitted (or the stored response, replayed)"),
                              "400": bad, "404": _problem("No such case for this tenant"),
                              "409": _problem("Not open, idempotency conflict, in flight, "
                                              "or concurrent modification"),
                              "412": _problem("If-Match does not match the case version"),
                              "413": _problem("Body too large"), "415": _problem("Not JSON")},
            }},
        },
        "components": {"schemas": {
            "OpenCaseBody": OpenCaseBody.model_json_schema(),
            "SubmitCaseBody": SubmitCaseBody.model_json_schema(),
            "Case": CASE_SCHEMA,
            "Problem": PROBLEM_SCHEMA,
        }},
    }
