"""The case service's HTTP API (starlette): routes, rendering, and the error boundary.

Routes (bearer token required except for the OpenAPI document):
    POST /cases                  role officer: open a case -> 201, Location, ETag;
                                 optional Idempotency-Key
    GET  /cases/{id}             role officer or supervisor: read a case + ETag
    POST /cases/{id}/submit      role officer: submit; Idempotency-Key required;
                                 optional If-Match -> 412
    GET  /openapi.json           the OpenAPI 3.1 document (public)

The tenant is the token's ``tenant`` claim, the actor its ``sub``, the idempotency client
its ``client_id``; another tenant's case is 404 on every route (existence never leaks).
The shared edge (``casestream.http.edge``) sheds load (503), authenticates (401), rate
limits (429) and starts each request's deadline before a route runs.

Use cases run in starlette's thread pool (psycopg is used synchronously). Every error is
answered as ``application/problem+json`` (``problems.py``); a replayed idempotent response
carries ``Idempotent-Replayed: true``. Counters: ``app.state.counters`` (``counters.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import wraps
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR, Principal
from casestream.http import EdgePolicy, edge_app, principal_of
from services.case.adapters.http import requests as rq
from services.case.adapters.http.counters import CaseApiCounters
from services.case.adapters.http.models import OpenCaseBody, SubmitCaseBody, field_errors
from services.case.adapters.http.openapi import REPLAYED, openapi_document
from services.case.adapters.http.problems import INTERNAL_ERROR, Problem, problem_for
from services.case.application.commands import CaseView, OpenCase, SubmitCase
from services.case.application.idempotency import (
    IdempotencyScope,
    IdempotentRequest,
    StoredResponse,
    fingerprint,
)
from services.case.application.service import CaseService

log = logging.getLogger(__name__)

OPEN_ROUTE = "POST /cases"
SUBMIT_ROUTE = "POST /cases/{id}/submit"
REPLAYED_HEADER = REPLAYED

Endpoint = Callable[[Request], Awaitable[Response]]


def case_json(view: CaseView) -> dict[str, Any]:
    """The JSON representation of a case (timestamps as ISO-8601 UTC strings)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(view):
        value = getattr(view, f.name)
        out[f.name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def etag(version: int) -> str:
    """The ETag of a case representation: its aggregate version, quoted."""
    return f'"{version}"'


def _send(stored: StoredResponse, replayed: bool) -> JSONResponse:
    headers = dict(stored.headers)
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    return JSONResponse(dict(stored.body), status_code=stored.status, headers=headers)


def _case_id(request: Request) -> str:
    raw = request.path_params["case_id"]
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise Problem(status=404, code="case_not_found", detail=f"case {raw} not found") from None


def _validate(model: type[Any], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = field_errors(e)
        detail = "; ".join(f"{err.field}: {err.message}" for err in errors)
        raise Problem(status=400, code="validation_error", detail=detail, errors=errors) from None


def _boundary(fn: Endpoint, counters: CaseApiCounters) -> Endpoint:
    """Answer every exception as a problem; log unexpected ones with their traceback."""

    @wraps(fn)
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except Exception as e:  # noqa: BLE001 - this is the error boundary
            problem = problem_for(e)
            if problem is None:
                log.exception("unhandled error on %s %s", request.method, request.url.path)
                problem = INTERNAL_ERROR
            elif problem.status >= 500:
                log.warning("%s %s -> %d: %s", request.method, request.url.path,
                            problem.status, e.__cause__ or e)
            elif problem.code == "idempotency_conflict":
                counters.idempotency_conflicts += 1
            elif problem.code == "request_in_flight":
                counters.idempotency_in_flight += 1
            return problem.response(request.url.path)

    return wrapper


def _principal(request: Request, *roles: str) -> Principal:
    """The caller, if it holds one of ``roles`` (raises InvalidToken / AccessDenied)."""
    principal = principal_of(request)
    principal.require(*roles)
    return principal


class CaseRoutes:
    """Route handlers bound to a :class:`CaseService`."""

    def __init__(self, service: CaseService, *, counters: CaseApiCounters) -> None:
        self._service = service
        self._counters = counters

    def _send(self, stored: StoredResponse, replayed: bool) -> JSONResponse:
        if replayed:
            self._counters.idempotency_replays += 1
        return _send(stored, replayed)

    @staticmethod
    def _render(status: int, *, location: bool = False) -> Callable[[CaseView], StoredResponse]:
        def render(view: CaseView) -> StoredResponse:
            headers = {"ETag": etag(view.version)}
            if location:
                headers["Location"] = f"/cases/{view.id}"
            return StoredResponse(status=status, body=case_json(view), headers=headers)
        return render

    @staticmethod
    def _idempotent(request: Request, principal: Principal, route: str, key: str | None,
                    body: dict[str, Any]) -> IdempotentRequest | None:
        if key is None:
            return None
        scope = IdempotencyScope.of(tenant_id=principal.tenant_id, client_id=principal.client_id,
                                    route=route, raw_key=key)
        return IdempotentRequest(scope=scope,
                                 fingerprint=fingerprint(request.method, request.url.path, body))

    async def open_case(self, request: Request) -> Response:
        who = _principal(request, ROLE_OFFICER)
        key = rq.idempotency_key_of(request, required=False)
        data = await rq.read_json_object(request, required=True)
        body: OpenCaseBody = _validate(OpenCaseBody, data)
        cmd = OpenCase(tenant_id=who.tenant_id, actor_id=who.subject,
                       traceparent=rq.traceparent_of(request), **body.model_dump())
        idem = self._idempotent(request, who, OPEN_ROUTE, key, data)
        stored, replayed = await run_in_threadpool(
            self._service.open_case, cmd, self._render(201, location=True), idem)
        return self._send(stored, replayed)

    async def get_case(self, request: Request) -> Response:
        who = _principal(request, ROLE_OFFICER, ROLE_SUPERVISOR)
        case_id = _case_id(request)
        view = await run_in_threadpool(self._service.get_case, who.tenant_id, case_id)
        return JSONResponse(case_json(view), headers={"ETag": etag(view.version)})

    async def submit_case(self, request: Request) -> Response:
        who = _principal(request, ROLE_OFFICER)
        case_id = _case_id(request)
        key = rq.idempotency_key_of(request, required=True)
        assert key is not None
        if_match = rq.if_match_of(request)
        data = await rq.read_json_object(request, required=False)
        body: SubmitCaseBody = _validate(SubmitCaseBody, data)
        expected = None
        if if_match is not None:
            current = None
            if if_match.needs_current:
                view = await run_in_threadpool(self._service.get_case, who.tenant_id, case_id)
                current = view.version
            expected = if_match.expected_version(current)
        cmd = SubmitCase(tenant_id=who.tenant_id, actor_id=who.subject, case_id=case_id,
                         note=body.note, expected_version=expected,
                         traceparent=rq.traceparent_of(request))
        idem = self._idempotent(request, who, SUBMIT_ROUTE, key, data)
        assert idem is not None
        stored, replayed = await run_in_threadpool(
            self._service.submit_case, cmd, idem, self._render(200))
        return self._send(stored, replayed)


async def _openapi(_: Request) -> Response:
    return JSONResponse(openapi_document())


def build_app(service: CaseService, *, edge: EdgePolicy) -> Starlette:
    """Return the case API application behind the shared edge (``casestream.http.edge_app``:
    its 404/405 and error boundary; request bodies are limited by ``edge.body``).

    Args:
        service: the use cases.
        edge: token verification, in-flight limit, rate limits, request deadline, body limits.
    """
    counters = CaseApiCounters()
    routes = CaseRoutes(service, counters=counters)
    app = edge_app([
        Route("/cases", _boundary(routes.open_case, counters), methods=["POST"]),
        Route("/cases/{case_id}", _boundary(routes.get_case, counters), methods=["GET"]),
        Route("/cases/{case_id}/submit", _boundary(routes.submit_case, counters),
              methods=["POST"]),
        Route("/openapi.json", _openapi, methods=["GET"]),
    ], edge)
    counters.edge = app.state.counters
    app.state.counters = counters
    return app
