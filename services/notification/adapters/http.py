"""HTTP API of the notification service (starlette), behind the shared edge.

Routes (bearer token with role ``officer`` or ``supervisor``):
    GET /notices/{case_id}     the notice of a case
    GET /notices?status=&limit=  the tenant's notices, newest first; status
                               pending|sent|failed; limit 1..1000 (default 100)

The tenant is the token's ``tenant`` claim: a case without a notice and another
tenant's notice get the same 404 (existence never leaks); the list filters on the tenant
in SQL before its limit. The shared edge (``casestream.http.edge``) answers 401 (no/invalid
token), 429 (rate limit) and 503 (overload) first; a route-level 403 for a token without a
reading role; 503 with ``Retry-After`` when the request deadline passes or the database
cannot be reached. Errors are ``application/problem+json`` (RFC 9457) with a stable ``code``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import EdgePolicy, Limit, Operation, json_answer, openapi_document
from casestream.http import edge_app, guarded, openapi_route, principal_of, problem_answer
from casestream.http import problem_response, query_model, requires
from services.notification.domain.notice import Notice

log = logging.getLogger(__name__)

READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR)
_CASE_ID = re.compile(r"[\x21-\x7e]{1,128}")
T = TypeVar("T")


class NoticeListQuery(BaseModel):
    """``GET /notices`` query parameters (unknown ones are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["pending", "sent", "failed"] | None = Field(  # NoticeStatus values
        None, description="Only notices in this status.")
    limit: Limit = 100


class NoticeQueries(Protocol):
    """Read side of notices."""

    def get(self, case_id: str) -> Notice | None:
        """The notice of ``case_id`` (any tenant), or None."""
        ...

    def list(self, *, tenant_id: str, status: str | None, limit: int) -> list[Notice]:
        """Notices of ``tenant_id`` (filtered before ``limit``), newest first."""
        ...


def notice_json(n: Notice) -> dict[str, Any]:
    """The JSON view of a notice."""
    return {"case_id": n.case_id, "saga_id": n.saga_id, "tenant_id": n.tenant_id,
            "recipient_email": n.recipient_email, "penalty_cents": n.penalty_cents,
            "violation_code": n.violation_code, "message_id": n.message_id,
            "status": n.status.value, "attempts": n.attempts,
            "next_attempt_at": n.next_attempt_at.isoformat(), "last_error": n.last_error,
            "version": n.version, "created_at": n.created_at.isoformat(),
            "kind": n.kind.value, "reason": n.reason, "document_sha256": n.document_sha256}


async def _read(request: Request, work: Callable[[], T]) -> T | Response:
    """Run ``work`` in the thread pool; a passed deadline or storage trouble -> 503."""
    return await guarded(request, work, log=log,
                         unavailable="the notice store could not be read; retry later")


CASE_ID_SCHEMA = {"type": "string", "pattern": r"^[\x21-\x7e]{1,128}$"}
NOTICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["case_id", "saga_id", "tenant_id", "recipient_email", "status", "attempts",
                 "version", "created_at"],
    "properties": {"status": {"type": "string", "enum": ["pending", "sent", "failed"]},
                   "kind": {"type": "string", "enum": ["notice", "correction", "appeal_rejection",
                                                           "evidence_reminder"]},
                   "attempts": {"type": "integer", "minimum": 0},
                   "penalty_cents": {"type": ["integer", "null"]},
                   "created_at": {"type": "string", "format": "date-time"}},
}
OPENAPI = openapi_document("casestream notification service", "1.0.0", [
    Operation(method="get", path="/notices", operation_id="listNotices",
              summary="The tenant's notices, newest first", query=NoticeListQuery,
              answers={"200": json_answer("Notices", {
                  "type": "object", "required": ["items", "count"],
                  "properties": {"items": {"type": "array", "items": NOTICE_SCHEMA},
                                 "count": {"type": "integer", "minimum": 0}}},
                  links={"GetNotice": {"operationId": "getNotice", "parameters": {
                      "case_id": "$response.body#/items/0/case_id"}}})}),
    Operation(method="get", path="/notices/{case_id}", operation_id="getNotice",
              summary="The notice of a case", path_params={"case_id": CASE_ID_SCHEMA},
              answers={"200": json_answer("The notice", NOTICE_SCHEMA),
                       "404": problem_answer("No notice for this case in this tenant")}),
])
"""The OpenAPI document served at ``/openapi.json``."""


def build_app(queries: NoticeQueries, *, edge: EdgePolicy) -> Starlette:
    """The starlette app behind the shared edge (health routes are added by
    ``ServiceProcess``). ``app.state.counters`` holds the edge's counters."""

    @requires(*READ_ROLES)
    async def get_notice(request: Request) -> Response:
        path, tenant = request.url.path, principal_of(request).tenant_id
        case_id = request.path_params["case_id"]
        not_found = problem_response(404, "notice_not_found", "Notice not found",
                                     f"no notice for case {case_id}", instance=path)
        if not _CASE_ID.fullmatch(case_id):  # never reaches the database (no NUL in text)
            return not_found
        notice = await _read(request, lambda: queries.get(case_id))
        if isinstance(notice, Response):
            return notice
        if notice is None or notice.tenant_id != tenant:
            return not_found
        return JSONResponse(notice_json(notice))

    @requires(*READ_ROLES)
    async def list_notices(request: Request) -> Response:
        tenant = principal_of(request).tenant_id
        query = query_model(request, NoticeListQuery)
        notices = await _read(request, lambda: queries.list(tenant_id=tenant, status=query.status,
                                                            limit=query.limit))
        if isinstance(notices, Response):
            return notices
        return JSONResponse({"items": [notice_json(n) for n in notices], "count": len(notices)})

    return edge_app([openapi_route(OPENAPI), Route("/notices", list_notices, methods=["GET"]),
                     Route("/notices/{case_id}", get_notice, methods=["GET"])], edge)
