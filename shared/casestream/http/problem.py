"""RFC 9457 problem responses for the shared HTTP edge (auth, shedding, rate limits, bodies).

Same body shape as the services' own problems, so a client sees one error format::

    {"type": "urn:casestream:problem:<code>", "title", "status", "detail", "code",
     "errors": [{"field", "message"}], "instance": "<path>", ...extra members}

served as ``application/problem+json``. A route (or a helper it calls) raises
:class:`HttpProblem`; the app built by ``casestream.http.edge_app`` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.responses import JSONResponse

from casestream.errors import CasestreamError

PROBLEM_JSON = "application/problem+json"


def problem_response(status: int, code: str, title: str, detail: str, *,
                     instance: str | None = None, headers: Mapping[str, str] | None = None,
                     extra: Mapping[str, Any] | None = None,
                     errors: Sequence[Mapping[str, str]] = ()) -> JSONResponse:
    """Return a problem+json response; ``extra`` adds members (e.g. ``retry_after_seconds``),
    ``errors`` lists the offending fields (``{"field", "message"}``)."""
    body: dict[str, Any] = {"type": f"urn:casestream:problem:{code}", "title": title,
                            "status": status, "detail": detail, "code": code,
                            "errors": [dict(e) for e in errors]}
    if instance:
        body["instance"] = instance
    body.update(extra or {})
    return JSONResponse(body, status_code=status, headers=dict(headers or {}),
                        media_type=PROBLEM_JSON)


class HttpProblem(CasestreamError):
    """A request answered with a problem (raise it from a route; ``edge_app`` renders it).

    Attributes:
        status: HTTP status code (4xx or 5xx).
        code: stable machine-readable code, e.g. ``validation_error``.
        title: short human summary of the code.
        detail: what was wrong with this request (never a traceback or SQL).
        errors: offending fields, ``({"field": "reason", "message": "..."}, ...)``; the
            field is a dotted body path (``items.0.name``), a query parameter or a header.
        headers: extra response headers (``Retry-After``, ``Connection``).
        extra: extra body members.
    """

    def __init__(self, status: int, code: str, title: str, detail: str, *,
                 errors: Sequence[Mapping[str, str]] = (),
                 headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.errors = tuple(dict(e) for e in errors)
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    @classmethod
    def bad_field(cls, field: str, message: str, *, code: str = "validation_error",
                  title: str = "Request validation failed") -> HttpProblem:
        """A 400 naming one field: ``detail`` is ``"<field>: <message>"``."""
        return cls(400, code, title, f"{field}: {message}",
                   errors=({"field": field, "message": message},))

    def response(self, instance: str | None = None) -> JSONResponse:
        """This problem as an ``application/problem+json`` response."""
        return problem_response(self.status, self.code, self.title, self.detail,
                                instance=instance, headers=self.headers, extra=self.extra,
                                errors=self.errors)


def limit_param(request: Any, *, default: int = 100, most: int = 1000) -> int | JSONResponse:
    """The ``limit`` query parameter of a list route (``default`` when absent), or, unless it
    is an integer in ``1..most``, the 400 problem ``invalid_limit`` (member ``field``:
    ``"limit"``) to return instead."""
    raw = request.query_params.get("limit", str(default))
    limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else -1
    if not 1 <= limit <= most:
        return problem_response(400, "invalid_limit", "Invalid limit",
                                f"limit must be an integer in 1..{most}",
                                instance=request.url.path, extra={"field": "limit"},
                                errors=({"field": "limit",
                                         "message": f"must be an integer in 1..{most}"},))
    return limit
