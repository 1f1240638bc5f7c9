"""Reading requests safely: bounded JSON bodies, Idempotency-Key, If-Match, traceparent.

Bodies are bounded, typed and parsed by the shared edge (``casestream.http.body``: 413,
415, 408; strict JSON: 400 ``malformed_json`` with the position, ``duplicate_json_key``,
``json_too_deep``, ``invalid_unicode``); a JSON value that is not an object -> 400. ``Idempotency-Key``: the
platform's check (``casestream.http.idempotency_key_of``): 1..255 printable ASCII characters,
no blank at either end (:data:`KEY_PATTERN`, also in ``/openapi.json``).
``If-Match`` follows RFC 9110 §13.1.1 (strong comparison; no match -> 412).

Tenant and actor are not read from headers: they come from the bearer token
(``casestream.http.principal_of``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from casestream.http import IDEMPOTENCY_HEADER, KEY_PATTERN, body_is_empty, json_body
from casestream.http import idempotency_key_of as _platform_key_of
from services.case.adapters.http.problems import validation

__all__ = ["IDEMPOTENCY_HEADER", "KEY_PATTERN", "IfMatch", "idempotency_key_of", "if_match_of",
           "read_json_object", "traceparent_of"]

# RFC 9110 §8.8.3: an ETag is an opaque string compared exactly; this API's are the
# version's canonical decimal, so "01" or "+1" name no version.
_STRONG_ETAG = re.compile(r'"(0|[1-9][0-9]{0,17})"')
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


async def read_json_object(request: Request, *, required: bool) -> dict[str, Any]:
    """Return the body as a JSON object (``{}`` for an empty optional body).

    Raises:
        Problem: 400 ``validation_error`` for an empty required body or a value that is not
            an object. HttpProblem: the edge's JSON errors (module docstring).
    """
    data = await json_body(request)
    if data is None and not await body_is_empty(request):
        raise validation("body", "must be a JSON object, not null")
    if data is None:
        if required:
            raise validation("body", "a JSON object is required")
        return {}
    if not isinstance(data, dict):
        raise validation("body", "must be a JSON object")
    return data


def idempotency_key_of(request: Request, *, required: bool) -> str | None:
    """Return the ``Idempotency-Key`` header (None if absent and optional).

    Raises:
        HttpProblem: 400 ``missing_idempotency_key`` if required and absent or empty; 400
            ``validation_error`` if malformed (an empty value sent is malformed too).
    """
    return _platform_key_of(request, required=required)


@dataclass(frozen=True, slots=True)
class IfMatch:
    """A parsed ``If-Match`` (RFC 9110 §13.1.1): ``*`` or the versions its strong ETags name.

    Entity tags are compared strongly: a weak tag (``W/"3"``) or anything that is not an
    ETag of this API matches nothing, so a header naming no current version fails the
    precondition (412), as the RFC requires, rather than being a bad request.
    """

    any: bool
    versions: frozenset[int]

    @property
    def needs_current(self) -> bool:
        """True when several tags leave a choice only the case's current version settles."""
        return not self.any and len(self.versions) > 1

    def expected_version(self, current: int | None = None) -> int | None:
        """The version the write must find (None: no precondition; 0: none can match).

        ``current`` is the case's version, read when :attr:`needs_current` (the write still
        checks the version atomically).
        """
        if self.any:
            return None
        if len(self.versions) == 1:
            return next(iter(self.versions))
        return current if current is not None and current in self.versions else 0


def if_match_of(request: Request) -> IfMatch | None:
    """Parse ``If-Match`` (None if absent). Never raises: see :class:`IfMatch`."""
    value = request.headers.get("if-match")
    if value is None:
        return None
    tags = [t.strip() for t in value.split(",")]
    if "*" in tags:
        return IfMatch(any=True, versions=frozenset())
    versions = frozenset(int(m.group(1)) for t in tags if (m := _STRONG_ETAG.fullmatch(t)))
    return IfMatch(any=False, versions=versions)


def traceparent_of(request: Request) -> str | None:
    """Return a well-formed W3C ``traceparent`` header, else None (ignored, never an error)."""
    value = request.headers.get("traceparent", "").strip().lower()
    return value if _TRACEPARENT.fullmatch(value) else None
