"""OpenAPI 3.1 documents for services behind the shared edge, built from request models.

A service lists its operations (:class:`Operation`: method, path, path parameters, the
pydantic models of its query string and body, its own answers and their JSON Schemas);
:func:`openapi_document` adds what the edge answers on every route — 401/403 with
``WWW-Authenticate``, 429 with ``Retry-After``, 503 (overload, deadline, storage) — and,
where a body or parameters are read, 400 and 408/413/415, so the document lists every
status an operation can give. :func:`openapi_route` serves it at ``GET /openapi.json``
(public: ``casestream.http.PUBLIC_PATHS``). Query models become ``in: query``
parameters from their JSON Schema (a ``null`` alternative dropped: a query string cannot
send null), body models the ``application/json`` request body.

The problem body is :data:`PROBLEM_SCHEMA` (``casestream.http.problem``); schemathesis
runs against each live service check the documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

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
"""JSON Schema of an RFC 9457 problem body as the edge and the services send it."""

RATE_LIMITED_SCHEMA: dict[str, Any] = {
    "allOf": [{"$ref": "#/components/schemas/Problem"}, {
        "type": "object", "required": ["retry_after_seconds"],
        "properties": {"retry_after_seconds": {"type": "integer", "minimum": 1},
                       "limit_scope": {"type": "string", "enum": ["tenant", "client"]}}}],
}
"""JSON Schema of the 429 problem (``casestream.http.ratelimit``)."""

RETRY_AFTER: dict[str, Any] = {"description": "Seconds to wait before retrying.",
                               "required": True,
                               "schema": {"type": "string", "pattern": "^[0-9]+$"}}
_CHALLENGE = {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}}


def problem_answer(description: str, *, headers: Mapping[str, Any] | None = None,
                   schema: str = "Problem") -> dict[str, Any]:
    """An OpenAPI response object: a problem+json body (``schema`` names a component)."""
    out: dict[str, Any] = {"description": description, "content": {
        "application/problem+json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}
    if headers:
        out["headers"] = dict(headers)
    return out


def edge_answers(*, reads_body: bool, reads_input: bool) -> dict[str, Any]:
    """The answers of the shared edge to an authenticated operation (module docstring)."""
    out: dict[str, Any] = {
        "401": problem_answer("No, malformed, expired or otherwise invalid bearer token",
                              headers=_CHALLENGE),
        "403": problem_answer("The token has no role allowed for this operation",
                              headers=_CHALLENGE),
        "429": problem_answer("Rate limit of the tenant or client exceeded",
                              headers={"Retry-After": RETRY_AFTER}, schema="RateLimited"),
        "503": problem_answer("Overloaded, storage unavailable, or the request deadline "
                              "passed; retry later", headers={"Retry-After": RETRY_AFTER}),
    }
    if reads_body or reads_input:
        out["400"] = problem_answer("Invalid input (each field named in errors) or malformed "
                                    "JSON (duplicate key, nesting, NUL, lone surrogate)")
    if reads_body:
        out["408"] = problem_answer("The body did not arrive within the read timeout")
        out["413"] = problem_answer("Body too large")
        out["415"] = problem_answer("Body is not application/json")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One operation of a service's API.

    Attributes:
        method, path: e.g. ``"get"``, ``"/sagas/{saga_id}"``.
        operation_id, summary: OpenAPI ``operationId`` / ``summary``.
        answers: the operation's own responses, status -> OpenAPI response object (use
            :func:`json_answer` / :func:`problem_answer`); the edge's are added.
        path_params: name -> JSON Schema of each path parameter.
        query: the pydantic model of the query string (``casestream.http.query_model``).
        body: the pydantic model of the JSON body (``casestream.http.body_model``).
        body_required: whether the body may be empty.
        headers: extra request header parameter objects.
    """

    method: str
    path: str
    operation_id: str
    summary: str
    answers: Mapping[str, Any]
    path_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_required: bool = True
    headers: Sequence[Mapping[str, Any]] = ()


def json_answer(description: str, schema: Mapping[str, Any], *,
                links: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAPI response object with an ``application/json`` body of ``schema``."""
    out: dict[str, Any] = {"description": description,
                           "content": {"application/json": {"schema": dict(schema)}}}
    if links:
        out["links"] = dict(links)
    return out


def _not_null(schema: Mapping[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if options:
        kept = [o for o in options if o.get("type") != "null"]
        if len(kept) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return {**kept[0], **rest}
    return dict(schema)


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The ``in: query`` parameter objects of a query model."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema.get("properties", {}).items():
        prop = _not_null(prop)
        prop.pop("title", None)
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required,
                                 "schema": prop}
        if "description" in prop:
            param["description"] = prop.pop("description")
        out.append(param)
    return out


def openapi_document(title: str, version: str, operations: Sequence[Operation], *,
                     description: str = "", schemas: Mapping[str, Any] | None = None
                     ) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations`` (module docstring).

    ``schemas`` adds components (referenced as ``#/components/schemas/<name>``); every
    body model is added under its class name.
    """
    components: dict[str, Any] = {"Problem": PROBLEM_SCHEMA, "RateLimited": RATE_LIMITED_SCHEMA,
                                  **(schemas or {})}
    paths: dict[str, Any] = {}
    for op in operations:
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": dict(schema)}
            for name, schema in op.path_params.items()]
        if op.query is not None:
            params += query_parameters(op.query)
        params += [dict(h) for h in op.headers]
        entry: dict[str, Any] = {
            "operationId": op.operation_id, "summary": op.summary,
            "responses": {**edge_answers(reads_body=op.body is not None,
                                         reads_input=bool(params)),
                          **{str(k): v for k, v in op.answers.items()}},
        }
        if params:
            entry["parameters"] = params
        if op.body is not None:
            components[op.body.__name__] = op.body.model_json_schema()
            entry["requestBody"] = {"required": op.body_required, "content": {
                "application/json": {"schema": {
                    "$ref": f"#/components/schemas/{op.body.__name__}"}}}}
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description or
                 "Bearer JWT with claims tenant, roles (officer, supervisor), sub. Data of "
                 "other tenants is never visible (404)."},
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {"securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                                          "bearerFormat": "JWT"}},
                       "schemas": components},
    }


def openapi_route(document: Mapping[str, Any]) -> Route:
    """``GET /openapi.json`` serving ``document``."""
    body = dict(document)

    async def openapi(_: Request) -> JSONResponse:
        return JSONResponse(body)

    return Route("/openapi.json", openapi, methods=["GET"])
