"""Request bodies and query strings validated through pydantic models, errors as problems.

A route declares what it accepts as a pydantic model and reads it with
:func:`body_model` or :func:`query_model`; anything else is a 400 problem naming each
offending field (``validation_error``, ``errors: [{"field", "message"}]``). The field
types here bound what a route stores or publishes:

- :func:`text` — a string of 1..``max_length`` characters, some not blank, no control
  character but tab, CR and LF (no NUL: PostgreSQL text cannot hold it);
- :data:`Identifier` — 1..128 printable ASCII characters (ids, subjects, case ids);
- :data:`Limit` — a list route's ``limit``, 1..1000.

A model's JSON Schema is what ``/openapi.json`` publishes for it
(``casestream.http.openapi``), so the document says exactly what is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field, StringConstraints, ValidationError
from starlette.requests import Request

from casestream.http.body import BODY_READ, JSON_BODY
from casestream.http.jsonbody import parse_json
from casestream.http.problem import HttpProblem

M = TypeVar("M", bound=BaseModel)

BLANK = (r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f"
         r"\u3000\ufeff")
"""Characters that count as blank (a regex character-class body): the union of the
whitespace of Python, ECMAScript and Unicode, spelt out so every regex engine (pydantic's,
Python's, a client's JSON Schema validator) reads a pattern alike."""

_CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
TEXT_PATTERN = rf"^[^{_CONTROL}]*[^{BLANK}{_CONTROL}][^{_CONTROL}]*$"
"""Some non-blank character; no control character but tab, LF, CR."""

IDENTIFIER_PATTERN = r"^[\x21-\x7e]{1,128}$"
"""1..128 printable ASCII characters, no space."""

Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN, max_length=128)]
"""An id as a client may send it (matched in full: no trailing newline or control)."""

Limit = Annotated[int, Field(ge=1, le=1000, description="Most items returned, 1..1000.")]
"""A list route's ``limit``."""


def text(max_length: int, *, min_length: int = 1) -> Any:
    """A text field type of ``min_length..max_length`` characters (module docstring)."""
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length,
                                            pattern=TEXT_PATTERN)]


def field_message(item: Any) -> str:
    """A plain message for one pydantic error item (``ValidationError.errors()``)."""
    kind = item["type"]
    if kind == "missing":
        return "field required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "string_pattern_mismatch":
        return "must contain a non-blank character and no control characters"
    return str(item["msg"])


def validation_problem(error: ValidationError, *, where: str = "body") -> HttpProblem:
    """The 400 ``validation_error`` for ``error``; fields are dotted paths (``where`` for
    an error of the whole input)."""
    errors = []
    for item in error.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in item["loc"]) or where
        errors.append({"field": field, "message": field_message(item)})
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return HttpProblem(400, "validation_error", "Request validation failed", detail,
                       errors=errors)


def validate(model: type[M], data: Any, *, where: str = "body") -> M:
    """``model`` validated from ``data``.

    Raises:
        HttpProblem: 400 ``validation_error`` naming every invalid field.
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_problem(e, where=where) from None


async def json_body(request: Request) -> Any:
    """The request's JSON value, checked by the edge (``casestream.http.body``); None for an
    empty body. Outside the edge the body is read and checked here.

    Raises:
        HttpProblem: 400 for malformed JSON (``casestream.http.jsonbody``).
    """
    state = request.scope.get("state") or {}
    if JSON_BODY in state:
        return state[JSON_BODY]
    raw = request.scope.get(BODY_READ)
    if raw is None:
        raw = await request.body()
    return parse_json(raw) if raw.strip() else None


async def body_is_empty(request: Request) -> bool:
    """Whether the request has no body or only whitespace (JSON ``null`` is a body: a
    client that sends it meant something, so it is not read as "no body")."""
    state = request.scope.get("state") or {}
    if JSON_BODY in state:
        return False
    raw = request.scope.get(BODY_READ)
    if raw is None:
        raw = await request.body()
    return not raw.strip()


async def body_model(request: Request, model: type[M], *, required: bool = True) -> M:
    """The body validated as ``model``; an empty body is ``{}`` unless ``required``
    (JSON ``null`` is not empty: 400 ``body: must be a JSON object``).

    Raises:
        HttpProblem: 400 ``validation_error`` (``body: a JSON object is required`` when
            empty and required, or not an object), or the JSON errors of :func:`json_body`.
    """
    value = await json_body(request)
    if value is None and not await body_is_empty(request):
        raise HttpProblem.bad_field("body", "must be a JSON object, not null")
    if value is None:
        if required:
            raise HttpProblem.bad_field("body", "a JSON object is required")
        value = {}
    if not isinstance(value, dict):
        raise HttpProblem.bad_field("body", "must be a JSON object")
    return validate(model, value)


def query_model(request: Request, model: type[M]) -> M:
    """The query string validated as ``model`` (declare ``extra="forbid"`` to refuse
    unknown parameters).

    Raises:
        HttpProblem: 400 ``validation_error`` naming each bad parameter; a parameter given
            more than once is refused.
    """
    data: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in data:
            raise HttpProblem.bad_field(key, "given more than once")
        data[key] = value
    return validate(model, data, where="query")
