"""HTTP API of the decision service (starlette), behind the shared edge.

Routes (bearer token with role ``officer`` or ``supervisor``):
    GET /decisions/{case_id}   the stored decision of a case

The tenant is the token's ``tenant`` claim: a case without a decision and
another tenant's decision get the same 404 (existence never leaks). The shared edge
(``casestream.http.edge``) answers 401 (no/invalid token), 429 (rate limit) and 503
(overload) first; a route-level 403 for a token without a reading role; 503 with
``Retry-After`` when the request deadline passes or the database cannot be reached.
Errors are ``application/problem+json`` (RFC 9457) with a stable ``code``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import EdgePolicy, Operation, json_answer, openapi_document, openapi_route
from casestream.http import edge_app, guarded, principal_of, problem_answer, problem_response
from casestream.http import requires
from services.decision.domain.decision import Decision

log = logging.getLogger(__name__)

READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR)
_CASE_ID = re.compile(r"[\x21-\x7e]{1,128}")


class DecisionQueries(Protocol):
    """Read side: the decision of a case (any tenant), or None."""

    def get(self, case_id: str) -> Decision | None: ...


def decision_json(d: Decision) -> dict[str, Any]:
    """The JSON view of a decision."""
    return {"case_id": d.case_id, "tenant_id": d.tenant_id, "saga_id": d.saga_id,
            "outcome": d.verdict.outcome.value, "violation_code": d.verdict.violation_code,
            "penalty_cents": d.verdict.penalty_cents, "reason": d.verdict.reason,
            "rules_version": d.rules_version, "decided_at": d.decided_at.isoformat(),
            "request_event_id": d.request_event_id, "version": d.version}


OPENAPI = openapi_document("casestream decision service", "1.0.0", [
    Operation(method="get", path="/decisions/{case_id}", operation_id="getDecision",
              summary="The decision of a case",
              path_params={"case_id": {"type": "string", "pattern": r"^[\x21-\x7e]{1,128}$"}},
              answers={"200": json_answer("The decision", {
                  "type": "object",
                  "required": ["case_id", "tenant_id", "saga_id", "outcome", "rules_version",
                               "decided_at", "version"],
                  "properties": {"penalty_cents": {"type": ["integer", "null"]},
                                 "decided_at": {"type": "string", "format": "date-time"}}}),
                       "404": problem_answer("No decision for this case in this tenant")}),
])
"""The OpenAPI document served at ``/openapi.json``."""


def build_app(queries: DecisionQueries, *, edge: EdgePolicy) -> Starlette:
    """The starlette app behind the shared edge (health routes are added by
    ``ServiceProcess``). ``app.state.counters`` holds the edge's counters."""

    @requires(*READ_ROLES)
    async def get_decision(request: Request) -> Response:
        path, tenant = request.url.path, principal_of(request).tenant_id
        case_id = request.path_params["case_id"]
        not_found = problem_response(404, "decision_not_found", "Decision not found",
                                     f"no decision for case {case_id}", instance=path)
        if not _CASE_ID.fullmatch(case_id):  # never reaches the database (no NUL in text)
            return not_found
        decision = await guarded(request, lambda: queries.get(case_id), log=log,
                                 unavailable="the decision store could not be read; retry later")
        if isinstance(decision, Response):
            return decision
        if decision is None or decision.tenant_id != tenant:
            return not_found
        return JSONResponse(decision_json(decision))

    return edge_app([openapi_route(OPENAPI),
                     Route("/decisions/{case_id}", get_decision, methods=["GET"])], edge)
