"""Helpers shared by the case API's route modules: representation, path id, body model,
caller."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request

from casestream.auth import Principal
from casestream.http import principal_of
from services.case.adapters.http.models import field_errors
from services.case.adapters.http.problems import Problem
from services.case.application.commands import CaseView


def case_json(view: CaseView) -> dict[str, Any]:
    """The JSON representation of a case (timestamps as ISO-8601 UTC strings)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(view):
        value = getattr(view, f.name)
        out[f.name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def etag(version: int) -> str:
    """The ETag of a case representation: its aggregate version, quoted."""
    return f'"{version}"'


def case_id_of(request: Request) -> str:
    """The ``case_id`` path parameter as a canonical UUID; anything else is 404 (no such case)."""
    raw = request.path_params["case_id"]
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise Problem(status=404, code="case_not_found", detail=f"case {raw} not found") from None


def validate_body(model: type[Any], data: dict[str, Any]) -> Any:
    """``model`` validated from ``data``; a 400 ``validation_error`` naming each field otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = field_errors(e)
        detail = "; ".join(f"{err.field}: {err.message}" for err in errors)
        raise Problem(status=400, code="validation_error", detail=detail, errors=errors) from None


def principal_with(request: Request, *roles: str) -> Principal:
    """The caller, if it holds one of ``roles`` (raises InvalidToken / AccessDenied)."""
    principal = principal_of(request)
    principal.require(*roles)
    return principal
