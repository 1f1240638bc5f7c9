"""RFC 9457 problem responses for the shared HTTP edge (auth, shedding, rate limits).

Same body shape as the services' own problems, so a client sees one error format::

    {"type": "urn:casestream:problem:<code>", "title", "status", "detail", "code",
     "errors": [], "instance": "<path>", ...extra members}

served as ``application/problem+json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

PROBLEM_JSON = "application/problem+json"


def problem_response(status: int, code: str, title: str, detail: str, *,
                     instance: str | None = None, headers: Mapping[str, str] | None = None,
                     extra: Mapping[str, Any] | None = None) -> JSONResponse:
    """Return a problem+json response; ``extra`` adds members (e.g. ``retry_after_seconds``)."""
    body: dict[str, Any] = {"type": f"urn:casestream:problem:{code}", "title": title,
                            "status": status, "detail": detail, "code": code, "errors": []}
    if instance:
        body["instance"] = instance
    body.update(extra or {})
    return JSONResponse(body, status_code=status, headers=dict(headers or {}),
                        media_type=PROBLEM_JSON)
