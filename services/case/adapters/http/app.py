"""The case service's HTTP API (starlette): routes, rendering, and the error boundary.

Routes (bearer token required except for the OpenAPI document):
    POST /cases                  role officer: open a case -> 201, Location, ETag;
                                 optional Idempotency-Key
    GET  /cases/{id}             role officer or supervisor: read a case + ETag
    POST /cases/{id}/submit      role officer: submit; Idempotency-Key required;
                                 optional If-Match -> 412
    GET  /openapi.json           the OpenAPI 3.1 document (public)
    and the regulator's workflow (search, assignment, evidence, review, withdrawal, appeal):
    ``workflow.py``

The tenant is the token's ``tenant`` claim, the actor its ``sub``, the idempotency client
its ``client_id``; another tenant's case is 404 on every route (existence never leaks).
The shared edge (``casestream.http.edge``) sheds load (503), authenticates (401), rate
limits (429) and starts each request's deadline before a route runs.

Use cases run in starlette's thread pool (psycopg is used synchronously). Every error is
answered as ``application/problem+json`` (``problems.py``). Idempotency keys are the
platform's component (``casestream.http.Idempotency``, ``CaseService.idempotency``): a
replayed response carries ``Idempotent-Replayed: true``; its counters are
``app.state.counters`` (``idempotency_replays_total``... on ``/metrics``).
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
from services.case.adapters.http.common import case_id_of as _case_id
from services.case.adapters.http.common import case_json, etag
from services.case.adapters.http.common import principal_with as _principal
from services.case.adapters.http.common import validate_body as _validate
from services.case.adapters.http.models import OpenCaseBody, SubmitCaseBody, field_errors
from services.case.adapters.http.openapi import REPLAYED, openapi_document
from services.case.adapters.http.workflow import WorkflowRoutes
from services.case.adapters.http.problems import INTERNAL_ERROR, Problem, problem_for
from services.case.application.commands import CaseView, OpenCase, SubmitCase
from services.case.application import IdempotentRequest, StoredResponse
from services.case.application.service import CaseService

log = logging.getLogger(__name__)

OPEN_ROUTE = "POST /cases"
SUBMIT_ROUTE = "POST /cases/{id}/submit"
REPLAYED_HEADER = REPLAYED

Endpoint = Callable[[Request], Awaitable[Response]]


def _boundary(fn: Endpoint) -> Endpoint:
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
            return problem.response(request.url.path)

    return wrapper


class CaseRoutes:
    """Route handlers bound to a :class:`CaseService`."""

    def __init__(self, service: CaseService) -> None:
        self._service = service

    def _send(self, stored: StoredResponse, replayed: bool) -> JSONResponse:
        return self._service.idempotency.respond(stored, replayed)

    @staticmethod
    def _render(status: int, *, location: bool = False) -> Callable[[CaseView], StoredResponse]:
        def render(view: CaseView) -> StoredResponse:
            headers = {"ETag": etag(view.version)}
            if location:
                headers["Location"] = f"/cases/{view.id}"
            return StoredResponse(status=status, body=case_json(view), headers=headers)
        return render

    def _idempotent(self, request: Request, principal: Principal, route: str, key: str | None,
                    body: dict[str, Any]) -> IdempotentRequest | None:
        # ``key`` was checked (and ``principal`` authorised) before the body was read
        if key is None:
            return None
        return self._service.idempotency.claim(request, route, body)

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

    async def expected_version(self, request: Request, tenant_id: str,
                               case_id: str) -> int | None:
        """The version ``If-Match`` requires (None: no precondition; see ``requests.IfMatch``)."""
        if_match = rq.if_match_of(request)
        if if_match is None:
            return None
        current = None
        if if_match.needs_current:
            view = await run_in_threadpool(self._service.get_case, tenant_id, case_id)
            current = view.version
        return if_match.expected_version(current)

    async def submit_case(self, request: Request) -> Response:
        who = _principal(request, ROLE_OFFICER)
        case_id = _case_id(request)
        key = rq.idempotency_key_of(request, required=True)
        assert key is not None
        data = await rq.read_json_object(request, required=False)
        body: SubmitCaseBody = _validate(SubmitCaseBody, data)
        expected = await self.expected_version(request, who.tenant_id, case_id)
        cmd = SubmitCase(tenant_id=who.tenant_id, actor_id=who.subject, case_id=case_id,
                         note=body.note, expected_version=expected,
                         traceparent=rq.traceparent_of(request))
        idem = self._idempotent(request, who, SUBMIT_ROUTE, key, data)
        assert idem is not None
        stored, replayed = await run_in_threadpool(
            self._service.submit_case, cmd, idem, self._render(200))
        return self._send(stored, replayed)

    # the names the workflow routes use (``workflow.WorkflowRoutes``)
    @property
    def service(self) -> CaseService:
        """The use cases."""
        return self._service

    def render(self, status: int) -> Callable[[CaseView], StoredResponse]:
        """A renderer answering the case with ``status`` and its ETag."""
        return self._render(status)

    def idempotent(self, request: Request, principal: Principal, route: str, key: str | None,
                   body: dict[str, Any]) -> IdempotentRequest | None:
        """The idempotent request of ``key`` in ``route``'s scope (None without a key)."""
        return self._idempotent(request, principal, route, key, body)

    def send(self, stored: StoredResponse, replayed: bool) -> JSONResponse:
        """Answer ``stored`` (``Idempotent-Replayed: true`` when replayed; counted)."""
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
    routes = CaseRoutes(service)
    flow = WorkflowRoutes(routes)

    def route(path: str, endpoint: Endpoint, method: str) -> Route:
        return Route(path, _boundary(endpoint), methods=[method])

    app = edge_app([
        Route("/cases", _boundary(routes.open_case), methods=["POST"]),
        route("/cases", flow.search, "GET"),
        route("/cases/{case_id}/assignment", flow.assign, "POST"),
        route("/cases/{case_id}/evidence-requests", flow.request_evidence, "POST"),
        route("/cases/{case_id}/evidence", flow.submit_evidence, "POST"),
        route("/cases/{case_id}/evidence", flow.list_evidence, "GET"),
        route("/cases/{case_id}/review", flow.start_review, "POST"),
        route("/cases/{case_id}/withdrawal", flow.withdraw, "POST"),
        route("/cases/{case_id}/appeal", flow.appeal, "POST"),
        route("/cases/{case_id}/correction", flow.correct_notice, "POST"),
        Route("/cases/{case_id}", _boundary(routes.get_case), methods=["GET"]),
        Route("/cases/{case_id}/submit", _boundary(routes.submit_case),
              methods=["POST"]),
        Route("/openapi.json", _openapi, methods=["GET"]),
    ], edge)
    service.idempotency.install(app)
    return app
