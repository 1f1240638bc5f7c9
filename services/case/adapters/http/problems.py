"""RFC 9457 problem details: the only error body the case API sends.

Body: ``{"type", "title", "status", "detail", "code", "errors": [{"field", "message"}],
"instance"}`` with media type ``application/problem+json``. ``code`` is stable and
machine-readable; ``type`` is ``urn:casestream:problem:<code>``. Every exception is mapped
here, at one boundary; anything unexpected becomes a bare 500 ``internal_error`` (logged
with its traceback server-side, never sent to the client). The answers of the shared
edge (``casestream.http``: 401, 403, 429, 503 ``overloaded``) have the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starlette.responses import JSONResponse

from casestream.auth import AuthError
from casestream.errors import ConcurrencyError
from casestream.http import answer_for
from casestream.http import DeadlineExceeded, HttpProblem

from services.case.application.errors import PreconditionFailed, StorageUnavailable
from services.case.domain.errors import (
    CaseNotFound,
    CaseValidationError,
    EvidenceNotFound,
    InvalidTransition,
)

PROBLEM_JSON = "application/problem+json"

TITLES: dict[str, str] = {
    "validation_error": "Request validation failed",
    "malformed_json": "Malformed JSON body",
    "duplicate_json_key": "Duplicate JSON key",
    "json_too_deep": "JSON nested too deeply",
    "invalid_unicode": "Invalid Unicode in JSON body",
    "request_timeout": "Request body not received in time",
    "missing_header": "Required header missing",
    "missing_idempotency_key": "Idempotency-Key header required",
    "case_not_found": "Case not found",
    "evidence_not_found": "Evidence item not found",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "invalid_transition": "Case state does not allow this action",
    "idempotency_conflict": "Idempotency key reused with a different request",
    "request_in_flight": "A request with this Idempotency-Key is in progress",
    "concurrent_modification": "Case was modified concurrently",
    "precondition_failed": "Case version does not match If-Match",
    "payload_too_large": "Request body too large",
    "unsupported_media_type": "Unsupported media type",
    "service_unavailable": "Service temporarily unavailable",
    "deadline_exceeded": "Request deadline exceeded",
    "unauthorized": "Authentication required",
    "invalid_token": "Invalid bearer token",
    "forbidden": "Operation not allowed for this role",
    "internal_error": "Internal server error",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldError:
    """One invalid input: ``field`` is a body path (``severity``, ``a.0.b``) or a header name."""

    field: str
    message: str


class Problem(Exception):
    """An HTTP error answer; raise it from a route, the boundary renders it.

    Attributes:
        status: HTTP status code.
        code: stable machine-readable code (a key of ``TITLES``).
        detail: readable explanation for this occurrence (never a traceback or SQL).
        errors: the offending fields, if any.
        headers: extra response headers (``Retry-After``, ``Allow``).
    """

    def __init__(self, *, status: int, code: str, detail: str,
                 errors: Sequence[FieldError] = (), headers: Mapping[str, str] | None = None):
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = tuple(errors)
        self.headers = dict(headers or {})

    def response(self, instance: str | None = None) -> JSONResponse:
        """Render as an ``application/problem+json`` response."""
        body: dict[str, object] = {
            "type": f"urn:casestream:problem:{self.code}",
            "title": TITLES.get(self.code, self.code.replace("_", " ").capitalize()),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            "errors": [{"field": e.field, "message": e.message} for e in self.errors],
        }
        if instance:
            body["instance"] = instance
        return JSONResponse(body, status_code=self.status, headers=dict(self.headers),
                            media_type=PROBLEM_JSON)


def validation(field_name: str, message: str, *, code: str = "validation_error") -> Problem:
    """A 400 naming one field."""
    return Problem(status=400, code=code, detail=f"{field_name}: {message}",
                   errors=(FieldError(field=field_name, message=message),))


def problem_for(exc: Exception) -> Problem | None:
    """Map a known case-service exception to its problem; None for anything else."""
    match exc:
        case Problem():
            return exc
        case HttpProblem():
            return Problem(status=exc.status, code=exc.code, detail=exc.detail,
                           errors=[FieldError(field=e["field"], message=e["message"])
                                   for e in exc.errors], headers=exc.headers)
        case CaseValidationError(field=f, message=m):
            return validation(f, m)
        case CaseNotFound():
            return Problem(status=404, code="case_not_found", detail=str(exc))
        case EvidenceNotFound():
            return Problem(status=404, code="evidence_not_found", detail=str(exc))
        case InvalidTransition(rule=rule):
            return Problem(status=409, code="invalid_transition", detail=str(exc),
                           errors=[FieldError(field="status", message=rule)] if rule else ())
        case PreconditionFailed():
            return Problem(status=412, code="precondition_failed", detail=str(exc))
        case ConcurrencyError():
            return Problem(status=409, code="concurrent_modification",
                           detail="the case changed while this request ran; reload and retry")
        case StorageUnavailable():
            return Problem(status=503, code="service_unavailable",
                           detail="storage is unavailable; retry later", headers={"Retry-After": "1"})
        case DeadlineExceeded():
            return Problem(status=503, code="deadline_exceeded",
                           detail="the request ran out of time; retry later",
                           headers={"Retry-After": "1"})
        case AuthError():
            answer = answer_for(exc)
            return Problem(status=answer.status, code=answer.code, detail=str(exc),
                           headers=answer.headers)
    return None


INTERNAL_ERROR = Problem(status=500, code="internal_error",
                         detail="an unexpected error occurred; it has been logged")
