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
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import EdgeCounters, EdgePolicy, edge_middleware, principal_of, requires
from casestream.http.deadline import DeadlineExceeded
from services.audit.application.ports import TimelineReader
from services.audit.application.service import case_timeline
from services.audit.application.views import CaseTimeline
from services.audit.domain.errors import TimelineNotFound

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR)
_CASE_ID = re.compile(r"[\x21-\x7e]{1,128}")


def problem(status: int, code: str, title: str, detail: str, *,
            errors: list[dict[str, str]] | None = None, instance: str | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    """An RFC 9457 problem response."""
    body: dict[str, Any] = {"type": f"urn:casestream:problem:{code}", "title": title,
                            "status": status, "detail": detail, "code": code,
                            "errors": errors or []}
    if instance:
        body["instance"] = instance
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


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
            return problem(404, "case_not_found", "Case not found",
                           "no audit timeline for this case id", instance=path)
        try:
            timeline = await run_in_threadpool(case_timeline, reader, tenant, case_id)
        except TimelineNotFound:
            return problem(404, "case_not_found", "Case not found",
                           f"no audit timeline for case {case_id}", instance=path)
        except DeadlineExceeded:
            return problem(503, "deadline_exceeded", "Request deadline exceeded",
                           "the request ran out of time; retry later", instance=path,
                           headers={"Retry-After": "1"})
        except Exception:  # noqa: BLE001 - error boundary: log, answer without details
            log.exception("unhandled error on GET %s", path)
            return problem(503, "service_unavailable", "Service temporarily unavailable",
                           "the audit store could not be read; retry later", instance=path,
                           headers={"Retry-After": "1"})
        return JSONResponse(timeline_json(timeline))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem(exc.status_code, code, str(exc.detail),
                       f"{request.method} {request.url.path}: {exc.detail}",
                       instance=request.url.path,
                       headers=dict(exc.headers) if exc.headers else None)

    handler: Callable[[Request], Awaitable[Response]] = get_timeline
    counters = EdgeCounters()
    app = Starlette(routes=[Route("/audit/cases/{case_id}", handler, methods=["GET"])],
                    middleware=edge_middleware(edge, counters),
                    exception_handlers={HTTPException: http_error})
    app.state.counters = counters
    return app
