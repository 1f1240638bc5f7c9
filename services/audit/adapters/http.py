"""The audit service's HTTP API (starlette).

``GET /audit/cases/{case_id}`` with a bearer token (role officer or supervisor) -> 200::

    {"case_id": "...", "events": [{"event_id", "event_type", "event_version",
      "aggregate_type", "aggregate_version", "occurred_at", "published_at", "source",
      "summary"}, ...],
     "freshness": {"case_last_applied_at": "...", "projection_last_applied_at": "..."}}

Events are ordered by occurred_at, then aggregate_version, then event id. The tenant is
the token's ``tenant`` claim: an unknown case or another tenant's case -> 404 (existence
never leaks). The shared edge (``casestream.http.edge``) answers 401 (no/invalid token),
429 (rate limit) and 503 (overload) first; a route-level 403 for a token without a
reading role. Errors are RFC 9457 ``application/problem+json`` with a stable ``code``;
nothing internal reaches the client.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import EdgePolicy, Operation, json_answer, openapi_document, openapi_route
from casestream.http import edge_app, guarded, principal_of, problem_answer, problem_response
from casestream.http import requires
from services.audit.application.ports import TimelineReader
from services.audit.application.service import case_timeline
from services.audit.application.views import CaseTimeline
from services.audit.domain.errors import TimelineNotFound

log = logging.getLogger(__name__)

READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR)
_CASE_ID = re.compile(r"[\x21-\x7e]{1,128}")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def timeline_json(timeline: CaseTimeline) -> dict[str, Any]:
    """The JSON body of a timeline (timestamps ISO-8601)."""
    events = []
    for event in timeline.events:
        item = dataclasses.asdict(event)
        item["occurred_at"] = _iso(event.occurred_at)
        item["published_at"] = _iso(event.published_at)
        events.append(item)
    return {
        "case_id": timeline.case_id,
        "events": events,
        "freshness": {
            "case_last_applied_at": _iso(timeline.case_last_applied_at),
            "projection_last_applied_at": _iso(timeline.projection_last_applied_at),
        },
    }


def _case_id(raw: str) -> str | None:
    """``raw`` if it can be a case id (1..128 printable ASCII characters), else None.

    Case ids are UUIDs; anything else is simply not found, and never reaches the
    database (PostgreSQL text cannot hold NUL).
    """
    return raw if _CASE_ID.fullmatch(raw) else None


OPENAPI = openapi_document("casestream audit service", "1.0.0", [
    Operation(method="get", path="/audit/cases/{case_id}", operation_id="getCaseTimeline",
              summary="The audit timeline of a case",
              path_params={"case_id": {"type": "string", "pattern": r"^[\x21-\x7e]{1,128}$"}},
              answers={"200": json_answer("The timeline", {
                  "type": "object", "required": ["case_id", "events", "freshness"],
                  "properties": {"events": {"type": "array", "items": {
                      "type": "object", "required": ["event_id", "event_type"]}},
                      "freshness": {"type": "object"}}}),
                       "404": problem_answer("No timeline for this case in this tenant")}),
])
"""The OpenAPI document served at ``/openapi.json``."""


def build_app(reader: TimelineReader, *, edge: EdgePolicy) -> Starlette:
    """Return the audit API over a timeline reader, behind the shared edge.

    ``app.state.counters`` holds the edge's :class:`~casestream.http.EdgeCounters`.
    """

    @requires(*READ_ROLES)
    async def get_timeline(request: Request) -> Response:
        path = request.url.path
        tenant = principal_of(request).tenant_id
        case_id = _case_id(request.path_params["case_id"])
        if case_id is None:
            return problem_response(404, "case_not_found", "Case not found",
                                    "no audit timeline for this case id", instance=path)
        try:
            timeline = await guarded(request, lambda: case_timeline(reader, tenant, case_id),
                                     log=log, passthrough=(TimelineNotFound,),
                                     unavailable="the audit store could not be read; retry later")
        except TimelineNotFound:
            return problem_response(404, "case_not_found", "Case not found",
                                    f"no audit timeline for case {case_id}", instance=path)
        if isinstance(timeline, Response):
            return timeline
        return JSONResponse(timeline_json(timeline))

    return edge_app([openapi_route(OPENAPI),
                     Route("/audit/cases/{case_id}", get_timeline, methods=["GET"])], edge)
