"""HTTP API of the decision service (starlette).

Routes:
    GET /decisions/{case_id}   the stored decision of a case (404 if none yet)

Errors are ``application/problem+json`` (RFC 9457).
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.decision.domain.decision import Decision


class DecisionQueries(Protocol):
    """Read side: the decision of a case, or None."""

    def get(self, case_id: str) -> Decision | None: ...


def decision_json(d: Decision) -> dict[str, Any]:
    """The JSON view of a decision."""
    return {"case_id": d.case_id, "tenant_id": d.tenant_id, "saga_id": d.saga_id,
            "outcome": d.verdict.outcome.value, "violation_code": d.verdict.violation_code,
            "penalty_cents": d.verdict.penalty_cents, "reason": d.verdict.reason,
            "rules_version": d.rules_version, "decided_at": d.decided_at.isoformat(),
            "request_event_id": d.request_event_id, "version": d.version}


def build_app(queries: DecisionQueries) -> Starlette:
    """The starlette app (health routes are added by ``ServiceProcess``)."""

    def get_decision(request: Request) -> Response:
        case_id = request.path_params["case_id"]
        decision = queries.get(case_id)
        if decision is None:
            return JSONResponse({"type": "about:blank", "title": "Decision not found",
                                 "status": 404, "detail": f"no decision for case {case_id}"},
                                status_code=404, media_type="application/problem+json")
        return JSONResponse(decision_json(decision))

    return Starlette(routes=[Route("/decisions/{case_id}", get_decision, methods=["GET"])])
