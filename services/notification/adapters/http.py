"""HTTP API of the notification service (starlette).

Routes:
    GET /notices/{case_id}     the notice of a case (404 if none)
    GET /notices?status=&limit=  newest first; status pending|sent|failed; limit 1..1000

Errors are ``application/problem+json`` (RFC 9457).
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.notification.domain.notice import Notice, NoticeStatus


class NoticeQueries(Protocol):
    """Read side of notices."""

    def get(self, case_id: str) -> Notice | None: ...

    def list(self, *, status: str | None, limit: int) -> list[Notice]: ...


def _problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status,
                         "detail": detail, **extra},
                        status_code=status, media_type="application/problem+json")


def notice_json(n: Notice) -> dict[str, Any]:
    """The JSON view of a notice."""
    return {"case_id": n.case_id, "saga_id": n.saga_id, "tenant_id": n.tenant_id,
            "recipient_email": n.recipient_email, "penalty_cents": n.penalty_cents,
            "violation_code": n.violation_code, "message_id": n.message_id,
            "status": n.status.value, "attempts": n.attempts,
            "next_attempt_at": n.next_attempt_at.isoformat(), "last_error": n.last_error,
            "version": n.version, "created_at": n.created_at.isoformat()}


def build_app(queries: NoticeQueries) -> Starlette:
    """The starlette app (health routes are added by ``ServiceProcess``)."""
    statuses = {s.value for s in NoticeStatus}

    def get_notice(request: Request) -> Response:
        case_id = request.path_params["case_id"]
        notice = queries.get(case_id)
        if notice is None:
            return _problem(404, "Notice not found", f"no notice for case {case_id}")
        return JSONResponse(notice_json(notice))

    def list_notices(request: Request) -> Response:
        status = request.query_params.get("status")
        if status is not None and status not in statuses:
            return _problem(400, "Invalid status", f"status must be one of {sorted(statuses)}",
                            field="status")
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            limit = -1
        if not 1 <= limit <= 1000:
            return _problem(400, "Invalid limit", "limit must be an integer in 1..1000",
                            field="limit")
        notices = queries.list(status=status, limit=limit)
        return JSONResponse({"items": [notice_json(n) for n in notices], "count": len(notices)})

    return Starlette(routes=[Route("/notices", list_notices, methods=["GET"]),
                             Route("/notices/{case_id}", get_notice, methods=["GET"])])
