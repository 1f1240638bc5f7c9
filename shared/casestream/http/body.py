"""Request bodies at the edge: bounded in size and time, JSON checked once for every route.

:class:`RequestBodyMiddleware` (outermost, before load shedding) reads the whole body
before the request takes an in-flight slot, so a client that trickles its body holds a
coroutine, not one of the ``max_in_flight`` slots nor a thread. It is a gate for bodies
only, and anonymous bodies get a small share of it:

- an HTTP/1.x request without a body (no ``Content-Length`` above 0, no
  ``Transfer-Encoding``) and
  the probe paths (``exempt_paths``: ``/healthz``, ``/readyz``...) pass straight through:
  no budget is taken, nothing is refused here;
- the caller is authenticated from its headers *before* a byte of the body is read
  (``authenticate``): a request the app would refuse (401) is answered at once with
  ``Connection: close`` and its body is never read;
- bodies of anonymous callers (public paths) share ``anonymous_pending`` reads in total
  and ``anonymous_per_client`` per client address; past either -> 503 ``overloaded``;
- ``Content-Length`` above ``max_bytes`` -> 413 ``payload_too_large`` at once; a streamed
  body passing ``max_bytes`` -> 413 when it does;
- a body whose ``Content-Type`` is not one of ``media_types`` (default
  ``application/json`` and any ``application/*+json``) -> 415 ``unsupported_media_type``
  before a byte is read;
- a body not complete ``read_timeout_s`` after the request's headers -> 408
  ``request_timeout`` with ``Connection: close`` (RFC 9110 §15.5.9);
- more than ``max_pending`` bodies being read at once -> 503 ``overloaded``
  (``Retry-After``);
- a client that disconnects while sending is counted (``EdgeCounters.client_disconnects``)
  and logged at DEBUG: nothing is answered, nothing is an error.

The inner app then receives the buffered body as one ``http.request`` message (later
``receive`` calls reach the client's connection, so a disconnect is still seen).

:class:`JsonBodyMiddleware` (innermost, after authentication and rate limits) parses a
non-empty JSON body with :func:`casestream.http.jsonbody.parse_json` (duplicate keys,
depth, NUL and lone surrogates refused with a 400 naming the field) and keeps the value
in ``scope["state"]["json_body"]``, where :func:`casestream.http.models.json_body`
reads it; a route reading ``await request.json()`` itself gets only checked JSON too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from casestream.http.counters import EdgeCounters
from casestream.http.jsonbody import DEFAULT_MAX_DEPTH, parse_json
from casestream.http.problem import HttpProblem, problem_response
from casestream.http.shedding import PROBE_PATHS

log = logging.getLogger(__name__)

JSON_BODY = "json_body"
"""Key of the parsed body in ``scope["state"]``."""
BODY_READ = "casestream.body"
"""Key of the buffered body bytes in ``scope`` (set by :class:`RequestBodyMiddleware`)."""

_CLOSE = {"Connection": "close"}

BodyAuthenticate = Callable[[Scope], "bool | ASGIApp"]
"""Who sends a body, decided from the request's headers before the body is read: ``True``
(authenticated: the whole ``max_pending`` budget), ``False`` (anonymous and allowed, a
public path: the anonymous budget) or an ASGI app (a response) answering instead, the
body left unread. It may put the principal in ``scope["state"]``; it must not block."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyLimits:
    """How much of a request body the edge reads, how fast, and what it must be.

    Attributes:
        max_bytes: largest body accepted, bytes (>= 1; larger -> 413).
        read_timeout_s: time the whole body may take to arrive, seconds (> 0; then 408).
        max_pending: bodies read at the same time (>= 1; beyond -> 503).
        anonymous_pending: of those, bodies of unauthenticated callers (>= 1; beyond -> 503).
        anonymous_per_client: bodies one unauthenticated client address sends at the same
            time (>= 1; beyond -> 503). Behind a proxy every client has the proxy's address,
            so this is then a second total.
        media_types: accepted ``Content-Type`` media types of a non-empty body (lower
            case, parameters ignored); ``application/*+json`` is JSON too.
        max_depth: JSON nesting allowed (arrays/objects; the top level is 1).
    """

    max_bytes: int = 64 * 1024
    read_timeout_s: float = 10.0
    max_pending: int = 256
    anonymous_pending: int = 16
    anonymous_per_client: int = 4
    media_types: frozenset[str] = frozenset({"application/json"})
    max_depth: int = DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        if (self.max_bytes < 1 or self.read_timeout_s <= 0 or self.max_pending < 1
                or self.anonymous_pending < 1 or self.anonymous_per_client < 1):
            raise ValueError(f"invalid body limits: {self}")


def media_type(headers: Headers) -> str:
    """The media type of ``Content-Type``, lower case, without parameters ("" if none)."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def is_json(media: str) -> bool:
    """``application/json`` or a structured-syntax ``+json`` type (RFC 6839 §3.1)."""
    return media == "application/json" or (media.startswith("application/")
                                            and media.endswith("+json"))


_TOO_LARGE = "too large"
_GONE = "client gone"


class RequestBodyMiddleware:
    """Read and bound each request body before the app runs (see module docstring).

    Args:
        app: the wrapped ASGI app.
        limits: size, time and media-type limits, the budgets.
        counters: ``client_disconnects``, ``body_timeouts``, ``shed`` are incremented.
        authenticate: see :data:`BodyAuthenticate` (None: every caller counts as
            authenticated, for an app behind its own gate).
        exempt_paths: passed through untouched (the probes).
    """

    def __init__(self, app: ASGIApp, *, limits: BodyLimits = BodyLimits(),
                 counters: EdgeCounters | None = None,
                 authenticate: BodyAuthenticate | None = None,
                 exempt_paths: Collection[str] = PROBE_PATHS) -> None:
        self.app = app
        self.limits = limits
        self.pending = 0
        self.anonymous = 0
        self._by_client: Counter[str] = Counter()
        self._counters = counters or EdgeCounters()
        self._authenticate = authenticate
        self._exempt = frozenset(exempt_paths)

    def _accepts(self, media: str) -> bool:
        return media in self.limits.media_types or (
            is_json(media) and "application/json" in self.limits.media_types)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._exempt:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        if declared is not None and declared > self.limits.max_bytes:
            await self._too_large(path)(scope, receive, send)
            return
        # HTTP/1.x framing (RFC 9112 §6.3): neither header means no body; HTTP/2 and later
        # may stream one without Content-Length, so those always go through the gate
        has_body = ((declared or 0) > 0 or "transfer-encoding" in headers
                    or scope.get("http_version", "1.1") not in ("1.0", "1.1"))
        if not has_body:
            # nothing to wait for: no budget taken, so a full gate never refuses these
            scope[BODY_READ] = b""
            await self.app(scope, receive, send)
            return
        media = media_type(headers)
        if not self._accepts(media):
            await problem_response(
                415, "unsupported_media_type", "Unsupported media type",
                f"send the body as application/json, not {media or 'no content type'}",
                instance=path, headers=_CLOSE,
                errors=({"field": "Content-Type", "message": "must be application/json"},),
            )(scope, receive, send)
            return
        verdict = self._authenticate(scope) if self._authenticate is not None else True
        if not isinstance(verdict, bool):
            await verdict(scope, receive, send)
            return
        client = None if verdict else _client_address(scope)
        refused = self._budget_refusal(client)
        if refused:
            self._counters.shed += 1
            await problem_response(503, "overloaded", "Service overloaded",
                                   f"more than {refused} are being received; retry later",
                                   instance=path,
                                   headers={"Retry-After": "1", **_CLOSE})(scope, receive, send)
            return
        self.pending += 1
        if client is not None:
            self.anonymous += 1
            self._by_client[client] += 1
        try:
            body = await asyncio.wait_for(self._read(receive), self.limits.read_timeout_s)
        except TimeoutError:
            self._counters.body_timeouts += 1
            log.info("%s %s: request body not received within %.1f s; answered 408",
                     scope["method"], path, self.limits.read_timeout_s)
            await problem_response(
                408, "request_timeout", "Request body not received in time",
                f"the request body did not arrive within {self.limits.read_timeout_s:g} s",
                instance=path, headers=_CLOSE)(scope, receive, send)
            return
        finally:
            self.pending -= 1
            if client is not None:
                self.anonymous -= 1
                self._by_client[client] -= 1
                if not self._by_client[client]:
                    del self._by_client[client]
        if body is _TOO_LARGE:
            await self._too_large(path)(scope, receive, send)
            return
        if body is _GONE:
            self._counters.client_disconnects += 1
            log.debug("%s %s: client disconnected while sending its body", scope["method"], path)
            return
        assert isinstance(body, bytes)
        scope[BODY_READ] = body
        await self.app(scope, _replay(body, receive), send)

    def _budget_refusal(self, client: str | None) -> str:
        """What a new body would exceed ("" if none); ``client`` None: authenticated."""
        limits = self.limits
        if self.pending >= limits.max_pending:
            return f"{limits.max_pending} request bodies"
        if client is None:
            return ""
        if self.anonymous >= limits.anonymous_pending:
            return f"{limits.anonymous_pending} unauthenticated request bodies"
        if self._by_client[client] >= limits.anonymous_per_client:
            return f"{limits.anonymous_per_client} unauthenticated request bodies of one client"
        return ""

    def _too_large(self, path: str) -> JSONResponse:
        return problem_response(413, "payload_too_large", "Request body too large",
                                f"the request body exceeds {self.limits.max_bytes} bytes",
                                instance=path, headers=_CLOSE,
                                errors=({"field": "body", "message":
                                         f"larger than {self.limits.max_bytes} bytes"},))

    async def _read(self, receive: Receive) -> bytes | str:
        """The whole body, or ``_TOO_LARGE`` / ``_GONE``."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _GONE
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_bytes:
                return _TOO_LARGE
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class JsonBodyMiddleware:
    """Parse a non-empty JSON body once, strictly (see module docstring).

    Args:
        app: the wrapped ASGI app.
        max_depth: JSON nesting allowed.
        exempt_paths: bodies of these paths are not parsed.
    """

    def __init__(self, app: ASGIApp, *, max_depth: int = DEFAULT_MAX_DEPTH,
                 exempt_paths: Collection[str] = ()) -> None:
        self.app = app
        self._max_depth = max_depth
        self._exempt = frozenset(exempt_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get(BODY_READ) if scope["type"] == "http" else None
        if (raw and raw.strip() and scope["path"] not in self._exempt
                and is_json(media_type(Headers(scope=scope)))):
            try:
                value = parse_json(raw, max_depth=self._max_depth)
            except HttpProblem as problem:
                await problem.response(scope["path"])(scope, receive, send)
                return
            scope.setdefault("state", {})[JSON_BODY] = value
        await self.app(scope, receive, send)
