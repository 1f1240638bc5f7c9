"""Request models of the case API (pydantic, strict) and their validation errors as fields.

Strict mode: JSON types must match (``"3"`` is not an integer, ``true`` is not one
either); unknown fields are rejected so a misspelt field never passes silently. Limits
mirror the domain rules in ``services.case.domain.values`` (which check again).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from services.case.adapters.http.problems import FieldError
from services.case.domain import values

Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                         max_length=values.TITLE_MAX)]
Summary = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                           max_length=values.SUMMARY_MAX)]
Email = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3,
                                         max_length=values.EMAIL_MAX,
                                         pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]
Note = Annotated[str, StringConstraints(strip_whitespace=True, max_length=values.NOTE_MAX)]


class OpenCaseBody(BaseModel):
    """``POST /cases`` body."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    title: Title = Field(description="Short title, 1..200 characters.")
    summary: Summary = Field(description="What the case is about, 1..500 characters.")
    severity: int = Field(ge=values.SEVERITY_MIN, le=values.SEVERITY_MAX,
                          description="1 (minor) .. 5 (critical).")
    evidence_count: int = Field(ge=0, le=values.AVRO_INT_MAX,
                                description="Number of evidence items, >= 0.")
    reporter_email: Email = Field(description="E-mail of the reporter (notices go there).")
    priority: Literal["LOW", "NORMAL", "HIGH"] = Field("NORMAL", description="Default NORMAL.")


class SubmitCaseBody(BaseModel):
    """``POST /cases/{id}/submit`` body (may be empty or ``{}``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    note: Note | None = Field(None, description="Optional submission note, <= 1000 characters.")


def field_errors(error: ValidationError) -> list[FieldError]:
    """Translate pydantic errors to ``FieldError``s with dotted paths and plain messages."""
    out = []
    for item in error.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or "body"
        out.append(FieldError(field=path, message=_message(item)))
    return out


def _message(item: Any) -> str:
    kind = item["type"]
    if kind == "missing":
        return "field required"
    if kind == "extra_forbidden":
        return "unknown field"
    return str(item["msg"])
