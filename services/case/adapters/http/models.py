"""Request models of the case API (pydantic, strict) and their validation errors as fields.

Strict mode: JSON types must match (``"3"`` is not an integer, ``true`` is not one
either; ``3.0`` is, as in JSON Schema); unknown fields are rejected so a misspelt field
never passes silently. Limits
mirror the domain rules in ``services.case.domain.values`` (which check again and trim).

The JSON Schemas of these models are the request schemas of ``/openapi.json``, so what
the document allows is exactly what is accepted: lengths count the characters as sent
(before trimming); a text must contain a character that is not blank (:data:`BLANK`, the
union of the whitespace of Python, ECMAScript and Unicode, spelt out so every regex
engine reads the pattern alike); NUL (U+0000) is refused everywhere (PostgreSQL text
cannot hold it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from casestream.http import BLANK, field_message
from services.case.adapters.http.problems import FieldError
from services.case.domain import values

TEXT_PATTERN = rf"^[^\x00]*[^{BLANK}\x00][^\x00]*$"
"""Some non-blank character, no NUL."""

NOTE_PATTERN = r"^[^\x00]*$"
"""No NUL (a blank note means no note)."""

_WORD = rf"[^@{BLANK}\x00]+"
EMAIL_PATTERN = rf"^{_WORD}@{_WORD}\.{_WORD}$"
"""``local@domain.tld`` without blanks (the domain's rule, ``values.check_email``)."""



def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` (draft 2020-12 §6.1.1): ``2.0`` is the integer 2."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""An integer as JSON Schema means it (never a bool, never a string)."""

Title = Annotated[str, StringConstraints(min_length=1, max_length=values.TITLE_MAX,
                                         pattern=TEXT_PATTERN)]
Summary = Annotated[str, StringConstraints(min_length=1, max_length=values.SUMMARY_MAX,
                                           pattern=TEXT_PATTERN)]
Email = Annotated[str, StringConstraints(min_length=5, max_length=values.EMAIL_MAX,
                                         pattern=EMAIL_PATTERN)]
Note = Annotated[str, StringConstraints(max_length=values.NOTE_MAX, pattern=NOTE_PATTERN)]


class OpenCaseBody(BaseModel):
    """``POST /cases`` body."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    title: Title = Field(description="Short title, 1..200 characters, not blank "
                                     "(leading/trailing blanks are trimmed).")
    summary: Summary = Field(description="What the case is about, 1..500 characters, not blank "
                                         "(trimmed).")
    severity: JsonInt = Field(ge=values.SEVERITY_MIN, le=values.SEVERITY_MAX,
                          description="1 (minor) .. 5 (critical).")
    evidence_count: JsonInt = Field(ge=0, le=values.AVRO_INT_MAX,
                                description="Number of evidence items, >= 0.")
    reporter_email: Email = Field(description="E-mail of the reporter (notices go there).")
    priority: Literal["LOW", "NORMAL", "HIGH"] = Field("NORMAL", description="Default NORMAL.")


class SubmitCaseBody(BaseModel):
    """``POST /cases/{id}/submit`` body (may be empty or ``{}``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    note: Note | None = Field(None, description="Optional submission note, <= 1000 characters; "
                                                "blank means none.")


def field_errors(error: ValidationError) -> list[FieldError]:
    """Translate pydantic errors to ``FieldError``s with dotted paths and plain messages."""
    out = []
    for item in error.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or "body"
        out.append(FieldError(field=path, message=_message(item)))
    return out


def _message(item: Any) -> str:
    if item["type"] == "string_pattern_mismatch":
        field = str(item["loc"][-1]) if item["loc"] else ""
        if field == "reporter_email":
            return "must be an e-mail address like name@example.org"
        if field == "note":
            return "must not contain NUL characters"
        return "must contain a non-blank character and no NUL characters"
    return field_message(item)
