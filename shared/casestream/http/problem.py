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


def limit_param(request: Any, *, default: int = 100, most: int = 1000) -> int | JSONResponse:
    """The ``limit`` query parameter of a list route (``default`` when absent), or, unless it
    is an integer in ``1..most``, the 400 problem ``invalid_limit`` (member ``field``:
    ``"limit"``) to return instead."""
    try:
        limit = int(request.query_params.get("limit", str(default)))
    except ValueError:
        limit = -1
    if not 1 <= limit <= most:
        return problem_response(400, "invalid_limit", "Invalid limit",
                                f"limit must be an integer in 1..{most}",
                                instance=request.url.path, extra={"field": "limit"})
    return limit
