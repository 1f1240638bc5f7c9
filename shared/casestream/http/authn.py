"""Bearer authentication middleware and role checks (pure ASGI; RFC 6750).

:class:`BearerAuthMiddleware` verifies ``Authorization: Bearer <jwt>`` on every HTTP
request except the public paths (``/healthz``, ``/readyz``, ``/readyz/consumers``, ``/openapi.json``) and puts
the :class:`~casestream.auth.tokens.Principal` in ``scope["state"]["principal"]`` (read it with
:func:`principal_of`). No or bad token -> 401 ``unauthorized`` / ``invalid_token`` with
``WWW-Authenticate: Bearer realm="casestream"[, error="invalid_token", ...]``. Role checks
are per route: :func:`requires` (decorator) or ``principal_of(request).require(...)`` +
:func:`forbidden` -> 403 ``forbidden`` with ``error="insufficient_scope"``.

Tenancy comes only from the token: there is no tenant header.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import wraps

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from casestream.auth.tokens import AccessDenied, AuthError, InvalidToken, Principal, TokenVerifier
from casestream.http.counters import EdgeCounters
from casestream.http.problem import problem_response

log = logging.getLogger(__name__)

REALM = "casestream"
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/readyz/consumers", "/openapi.json"})
PRINCIPAL = "principal"
VERIFIED = "casestream.principal"
"""Key in ``scope`` of the principal the body gate already verified from the same headers
(``casestream.http.edge.bearer_gate``): :class:`BearerAuthMiddleware` does not verify again."""

Endpoint = Callable[[Request], Awaitable[Response]]


def bearer_token(authorization: str | None) -> str:
    """Return the token of an ``Authorization`` header value.

    Raises:
        InvalidToken: header absent (``missing``), not the Bearer scheme, or empty token.
    """
    if authorization is None or not authorization.strip():
        raise InvalidToken("a bearer token is required", missing=True)
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise InvalidToken("authorization scheme must be Bearer")
    token = token.strip()
    if not token or " " in token:
        raise InvalidToken("bearer token malformed")
    return token


@dataclass(frozen=True, slots=True)
class AuthAnswer:
    """How an auth error is answered: status, problem code and title, challenge header."""

    status: int
    code: str
    title: str
    headers: dict[str, str]


def answer_for(error: AuthError) -> AuthAnswer:
    """The answer to ``error``: 401 for :class:`InvalidToken` (RFC 6750 §3: no ``error``
    attribute when no token was sent), 403 ``insufficient_scope`` for :class:`AccessDenied`."""
    if isinstance(error, AccessDenied):
        challenge = f'Bearer realm="{REALM}", error="insufficient_scope"'
        return AuthAnswer(403, "forbidden", "Operation not allowed for this role",
                          {"WWW-Authenticate": challenge})
    if isinstance(error, InvalidToken) and error.missing:
        return AuthAnswer(401, "unauthorized", "Authentication required",
                          {"WWW-Authenticate": f'Bearer realm="{REALM}"'})
    reason = error.reason if isinstance(error, InvalidToken) else "invalid token"
    return AuthAnswer(401, "invalid_token", "Invalid bearer token",
                      {"WWW-Authenticate": f'Bearer realm="{REALM}", error="invalid_token", '
                                           f'error_description="{reason}"'})


def unauthorized(error: InvalidToken, instance: str | None = None) -> Response:
    """The 401 problem response for ``error``."""
    a = answer_for(error)
    return problem_response(a.status, a.code, a.title, error.reason, instance=instance,
                            headers=a.headers)


def forbidden(error: AccessDenied, instance: str | None = None) -> Response:
    """The 403 problem response for ``error``."""
    a = answer_for(error)
    return problem_response(a.status, a.code, a.title, str(error), instance=instance,
                            headers=a.headers)


def principal_of(request: Request) -> Principal:
    """The authenticated principal of ``request``.

    Raises:
        InvalidToken: the route is not behind :class:`BearerAuthMiddleware` (treated as 401).
    """
    principal = request.scope.get("state", {}).get(PRINCIPAL)
    if not isinstance(principal, Principal):
        raise InvalidToken("a bearer token is required", missing=True)
    return principal


def requires(*roles: str) -> Callable[[Endpoint], Endpoint]:
    """Decorate an endpoint: 403 unless the principal holds one of ``roles`` (401 if none)."""

    def decorate(fn: Endpoint) -> Endpoint:
        @wraps(fn)
        async def endpoint(request: Request) -> Response:
            try:
                principal_of(request).require(*roles)
            except InvalidToken as e:
                return unauthorized(e, request.url.path)
            except AccessDenied as e:
                return forbidden(e, request.url.path)
            return await fn(request)

        return endpoint

    return decorate


class BearerAuthMiddleware:
    """Authenticate every non-public HTTP request (see module docstring).

    Args:
        app: the wrapped ASGI app.
        verifier: checks tokens.
        public_paths: paths served without a token.
        counters: ``unauthorized`` is incremented per 401.
    """

    def __init__(self, app: ASGIApp, *, verifier: TokenVerifier,
                 public_paths: Collection[str] = PUBLIC_PATHS,
                 counters: EdgeCounters | None = None) -> None:
        self.app = app
        self._verifier = verifier
        self._public = frozenset(public_paths)
        self._counters = counters or EdgeCounters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._public:
            await self.app(scope, receive, send)
            return
        verified = scope.get(VERIFIED)
        if isinstance(verified, Principal):
            scope.setdefault("state", {})[PRINCIPAL] = verified
            await self.app(scope, receive, send)
            return
        try:
            token = bearer_token(Headers(scope=scope).get("authorization"))
            principal = self._verifier.verify(token)
        except InvalidToken as e:
            self._counters.unauthorized += 1
            log.debug("401 on %s %s: %s", scope["method"], scope["path"], e.reason)
            await unauthorized(e, scope["path"])(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, receive, send)
