"""The audit service's HTTP API (starlette).

``GET /audit/cases/{case_id}`` with ``X-Tenant-Id`` -> 200::

    {"case_id": "...", "events": [{"event_id", "event_type", "event_version",
      "aggregate_type", "aggregate_version", "occurred_at", "published_at", "source",
      "summary"}, ...],
     "freshness": {"case_last_applied_at": "...", "projection_last_applied_at": "..."}}

Events are ordered by occurred_at, then aggregate_version, then event id. Unknown case
or another tenant's case -> 404; missing tenant header -> 400. Errors are RFC 9457
``application/problem+json`` with a stable ``code``; nothing internal reaches the client.
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

from services.audit.application.ports import TimelineReader
from services.audit.application.service import case_timeline
from services.audit.application.views import CaseTimeline
from services.audit.domain.errors import TimelineNotFound

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
TENANT_HEADER = "X-Tenant-Id"
_TENANT = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


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


def build_app(reader: TimelineReader) -> Starlette:
    """Return the audit API over a timeline reader."""

    async def get_timeline(request: Request) -> Response:
        path = request.url.path
        tenant = request.headers.get(TENANT_HEADER)
        if not tenant:
            return problem(400, "missing_header", "Required header missing",
                           f"{TENANT_HEADER}: header is required",
                           errors=[{"field": TENANT_HEADER, "message": "header is required"}],
                           instance=path)
        if not _TENANT.match(tenant):
            msg = "must be 1..64 characters of A-Z a-z 0-9 . _ : -"
            return problem(400, "validation_error", "Request validation failed",
                           f"{TENANT_HEADER}: {msg}",
                           errors=[{"field": TENANT_HEADER, "message": msg}], instance=path)
        case_id = request.path_params["case_id"]
        try:
            timeline = await run_in_threadpool(case_timeline, reader, tenant, case_id)
        except TimelineNotFound:
            return problem(404, "case_not_found", "Case not found",
                           f"no audit timeline for case {case_id}", instance=path)
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
    return Starlette(routes=[Route("/audit/cases/{case_id}", handler, methods=["GET"])],
                     exception_handlers={HTTPException: http_error})
