"""The watch service's HTTP API (starlette), behind the shared edge (``casestream.http``).

``PUT /watch/cases/{case_id}``: the caller (token subject) watches the case -> 201 (new) or
200 (already watching); with an ``Idempotency-Key`` a retry gets the first answer again
(``Idempotent-Replayed: true``; ``casestream.http.Idempotency``)::

    {"watch_id": "<case_id>/<watcher_id>", "case_id", "watcher_id", "version", "created_at"}

``GET /watch/cases/{case_id}`` -> 200::

    {"case_id", "case": {"state", "title", "aggregate_version", "updated_at"} | null,
     "watchers": ["<subject>", ...]}

The tenant is the token's ``tenant`` claim; a case nobody in the tenant watches and the
projection does not know -> 404 ``case_not_found``. Both routes need role officer or
supervisor (403 otherwise); the edge answers 401, 429 and 503 first. Errors are
``application/problem+json``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import IDEMPOTENCY_HEADER, KEY_PATTERN, EdgePolicy, HttpProblem, Idempotency
from casestream.http import Operation, StoredResponse
from casestream.http import edge_app, guarded, json_answer, openapi_document, openapi_route
from casestream.http import principal_of, problem_answer, problem_response, requires
from watch.application import CaseNotWatched, CaseWatch, Clock, UnitOfWork, case_watch
from watch.application import watch_case_once
from watch.domain import Watch

log = logging.getLogger(__name__)

ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR)
_CASE_ID = re.compile(r"[\x21-\x2e\x30-\x7e]{1,128}")  # printable ASCII but "/"
_UNAVAILABLE = "the watch store could not be reached; retry later"
WATCH_ROUTE = "PUT /watch/cases/{case_id}"


def watch_json(watch: Watch) -> dict[str, Any]:
    """The JSON body of a watch."""
    return {"watch_id": watch.id, "case_id": watch.case_id, "watcher_id": watch.watcher_id,
            "version": watch.version, "created_at": watch.created_at.isoformat()}


def case_watch_json(found: CaseWatch) -> dict[str, Any]:
    """The JSON body of a case and its watchers."""
    case = found.case
    return {"case_id": found.case_id, "watchers": list(found.watchers),
            "case": None if case is None else {
                "state": case.state, "title": case.title,
                "aggregate_version": case.aggregate_version,
                "updated_at": case.updated_at.isoformat()}}


_CASE_ID_SCHEMA = {"type": "string", "pattern": r"^[\x21-\x2e\x30-\x7e]{1,128}$"}
_WATCH = {"type": "object", "required": ["watch_id", "case_id", "watcher_id", "version",
                                         "created_at"]}
OPENAPI = openapi_document("watch service", "1.0.0", [
    Operation(method="put", path="/watch/cases/{case_id}", operation_id="watchCase",
              summary="Watch a case (as the token's subject)",
              path_params={"case_id": _CASE_ID_SCHEMA},
              answers={"201": json_answer("Now watching", _WATCH, links={
                  "GetWatchedCase": {"operationId": "getWatchedCase",
                                     "parameters": {"case_id": "$response.body#/case_id"}}}),
                       "200": json_answer("Already watching", _WATCH),
                       "404": problem_answer("Not a case id"),
                       "400": problem_answer("A malformed Idempotency-Key"),
                       "409": problem_answer("The Idempotency-Key was used for another "
                                             "request, or its first request is in flight")},
              headers=[{"name": IDEMPOTENCY_HEADER, "in": "header", "required": False,
                        "schema": {"type": "string", "pattern": KEY_PATTERN},
                        "description": "Retries with the same key get the first answer again "
                                       "(Idempotent-Replayed: true)."}]),
    Operation(method="get", path="/watch/cases/{case_id}", operation_id="getWatchedCase",
              summary="A watched case and its watchers", path_params={"case_id": _CASE_ID_SCHEMA},
              answers={"200": json_answer("The case and its watchers", {
                  "type": "object", "required": ["case_id", "case", "watchers"]}),
                       "404": problem_answer("Nobody in the tenant watches this case")}),
])
"""The OpenAPI document served at ``/openapi.json`` (``casestream.http.openapi_document``)."""


def _answer(watch: Watch, created: bool) -> StoredResponse:
    return StoredResponse(status=201 if created else 200, body=watch_json(watch))


def build_app(uow: UnitOfWork, clock: Clock, *, edge: EdgePolicy,
              keys: Idempotency | None = None) -> Starlette:
    """The watch API over ``uow`` (draw its connections through a ``DeadlinePool``);
    ``keys``: the Idempotency-Key component (default: 24 h on ``clock``)."""
    keys = keys if keys is not None else Idempotency(clock=clock.now)

    def not_found(path: str, case_id: str) -> Response:
        return problem_response(404, "case_not_found", "Case not found",
                                f"no watched case {case_id}", instance=path)

    @requires(*ROLES)
    async def get_case(request: Request) -> Response:
        path, case_id = request.url.path, request.path_params["case_id"]
        if not _CASE_ID.fullmatch(case_id):
            return not_found(path, case_id[:128])
        tenant = principal_of(request).tenant_id
        try:
            found = await guarded(request, lambda: case_watch(uow, tenant_id=tenant,
                                                               case_id=case_id),
                                  log=log, passthrough=(CaseNotWatched,), unavailable=_UNAVAILABLE)
        except CaseNotWatched:
            return not_found(path, case_id)
        if isinstance(found, Response):
            return found
        return JSONResponse(case_watch_json(found))

    @requires(*ROLES)
    async def put_watch(request: Request) -> Response:
        path, case_id = request.url.path, request.path_params["case_id"]
        if not _CASE_ID.fullmatch(case_id):
            return not_found(path, case_id[:128])
        principal = principal_of(request)
        claim = keys.claim(request, WATCH_ROUTE, None, required=False)
        done = await guarded(request, lambda: watch_case_once(
            uow, clock, keys, claim, _answer, tenant_id=principal.tenant_id, case_id=case_id,
            watcher_id=principal.subject), log=log, passthrough=(HttpProblem,),
            unavailable=_UNAVAILABLE)
        if isinstance(done, Response):
            return done
        return keys.respond(*done)

    app = edge_app([openapi_route(OPENAPI),
                    Route("/watch/cases/{case_id}", get_case, methods=["GET"]),
                    Route("/watch/cases/{case_id}", put_watch, methods=["PUT"])], edge)
    keys.install(app)  # idempotency_replays_total / _conflicts_total on /metrics
    return app
