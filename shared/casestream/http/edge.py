"""The HTTP edge of a service in one place: which middlewares, in which order, with what limits.

``edge_middleware(policy, counters)`` returns starlette ``Middleware`` entries, outermost
first:

1. :class:`~casestream.http.boundary.ErrorBoundaryMiddleware` — any failure escaping what
   follows is a problem+json answer (500 without details), a client gone is no error;
2. :class:`~casestream.http.body.RequestBodyMiddleware` — the body is read whole, bounded
   in bytes (413), media type (415) and time (408), *before* a slot is taken, so a client
   trickling its body holds no in-flight slot; the probes and body-less requests pass
   untouched, the token is checked from the headers before the body is read (401 without
   reading it), and anonymous bodies (public paths) get a small budget
   (``BodyLimits.anonymous_pending`` / ``anonymous_per_client``);
3. :class:`~casestream.http.shedding.LoadShedMiddleware` — refuse past the in-flight limit
   before doing any further work (503 + ``Retry-After``);
4. :class:`~casestream.http.deadline.DeadlineMiddleware` — the request's deadline starts;
5. :class:`~casestream.http.authn.BearerAuthMiddleware` — 401 without a valid token;
6. :class:`~casestream.http.ratelimit.RateLimitMiddleware` — 429 per tenant / client;
7. :class:`~casestream.http.body.JsonBodyMiddleware` — a JSON body parsed strictly (400 for
   duplicate keys, excessive depth, NUL or lone surrogates, naming the field).

Routes then check roles (``requires`` / ``Principal.require``) and scope every read and
write to ``principal.tenant_id``.

An app that is not a service (the operations console: its own sessions, HTML forms) mounts
the same edge: ``Starlette(routes, middleware=edge_middleware(EdgePolicy(verifier=None,
authenticate=check, public_paths=..., body=BodyLimits(media_types=...))))``, where
``check(scope)`` is a :data:`~casestream.http.body.BodyAuthenticate` deciding from the
headers (session cookie) whether a body may be read; with ``verifier=None`` no bearer
middleware is mounted and the routes check their own sessions (put the
:class:`~casestream.auth.tokens.Principal` in ``scope["state"]["principal"]`` for the
per-tenant rate limits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Scope

from casestream.auth.tokens import AuthSettings, InvalidToken, TokenVerifier
from casestream.errors import ConfigError
from casestream.http.authn import (
    PRINCIPAL,
    PUBLIC_PATHS,
    VERIFIED,
    BearerAuthMiddleware,
    bearer_token,
    unauthorized,
)
from casestream.http.body import BodyAuthenticate, BodyLimits, JsonBodyMiddleware, RequestBodyMiddleware
from casestream.http.boundary import ErrorBoundaryMiddleware
from casestream.http.counters import EdgeCounters
from casestream.http.deadline import DeadlineMiddleware
from casestream.http.ratelimit import RateLimit, RateLimiter, RateLimitMiddleware
from casestream.http.shedding import PROBE_PATHS, LoadShedMiddleware

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgePolicy:
    """Limits and credentials of one service's HTTP edge.

    Attributes:
        verifier: bearer token verification; None for an app with its own sessions (then
            ``authenticate`` is required and no bearer middleware is mounted).
        max_in_flight: concurrent requests per process before shedding (>= 1); keep it
            below starlette's thread pool (40) so no admitted request queues for a thread.
        per_tenant, per_client: token-bucket limits (None = unlimited).
        deadline_s: budget of every request for its outgoing calls, seconds.
        retry_after_s: ``Retry-After`` of a shed answer, seconds.
        public_paths: served without a token (probes, OpenAPI document).
        body: request body limits (size, read time, media types, JSON depth, budgets).
        authenticate: who may send a body, from the headers (default: a valid bearer
            token of ``verifier``, the public paths anonymous).
    """

    verifier: TokenVerifier | None
    max_in_flight: int = 32
    per_tenant: RateLimit | None = None
    per_client: RateLimit | None = None
    deadline_s: float = 5.0
    retry_after_s: int = 1
    public_paths: frozenset[str] = field(default=PUBLIC_PATHS)
    body: BodyLimits = field(default_factory=BodyLimits)
    authenticate: BodyAuthenticate | None = None


def bearer_gate(verifier: TokenVerifier, public_paths: frozenset[str],
                counters: EdgeCounters) -> BodyAuthenticate:
    """The body gate's check for a bearer-token app: a public path is anonymous (False), a
    valid token authenticated (True, the principal put in ``scope["state"]`` and kept for
    :class:`BearerAuthMiddleware`, which then does not verify it again), anything
    else the 401 of :class:`BearerAuthMiddleware` with ``Connection: close``, so an unread
    body ends the connection."""

    def check(scope: Scope) -> bool | ASGIApp:
        if scope["path"] in public_paths:
            return False
        try:
            principal = verifier.verify(bearer_token(Headers(scope=scope).get("authorization")))
        except InvalidToken as e:
            counters.unauthorized += 1
            response = unauthorized(e, scope["path"])
            response.headers["Connection"] = "close"
            return response
        scope[VERIFIED] = principal  # verified once per request
        scope.setdefault("state", {})[PRINCIPAL] = principal
        return True

    return check


def edge_middleware(policy: EdgePolicy, counters: EdgeCounters | None = None) -> list[Middleware]:
    """The middlewares of ``policy`` in order (module docstring); ``counters`` are shared.

    Raises:
        ValueError: ``policy`` has neither a verifier nor an ``authenticate`` check.
    """
    counters = counters if counters is not None else EdgeCounters()
    authenticate = policy.authenticate
    if authenticate is None:
        if policy.verifier is None:
            raise ValueError("an edge without a token verifier needs an authenticate check")
        authenticate = bearer_gate(policy.verifier, policy.public_paths, counters)
    stack = [
        Middleware(ErrorBoundaryMiddleware, counters=counters),
        Middleware(RequestBodyMiddleware, limits=policy.body, counters=counters,
                   authenticate=authenticate, exempt_paths=PROBE_PATHS),
        Middleware(LoadShedMiddleware, max_in_flight=policy.max_in_flight,
                   retry_after_s=policy.retry_after_s, exempt_paths=PROBE_PATHS,
                   counters=counters),
        Middleware(DeadlineMiddleware, budget_s=policy.deadline_s),
    ]
    if policy.verifier is not None:
        stack.append(Middleware(BearerAuthMiddleware, verifier=policy.verifier,
                                public_paths=policy.public_paths, counters=counters))
    if policy.per_tenant is not None or policy.per_client is not None:
        limiter = RateLimiter(per_tenant=policy.per_tenant, per_client=policy.per_client)
        stack.append(Middleware(RateLimitMiddleware, limiter=limiter, counters=counters))
    stack.append(Middleware(JsonBodyMiddleware, max_depth=policy.body.max_depth))
    return stack


class EdgeSettings(Protocol):
    """The settings fields a service's edge reads (``casestream.service.settings.ServiceSettings``)."""

    @property
    def auth(self) -> AuthSettings: ...
    @property
    def auto_register_schemas(self) -> bool: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def rate_tenant_per_s(self) -> float: ...
    @property
    def rate_tenant_burst(self) -> int: ...
    @property
    def rate_client_per_s(self) -> float: ...
    @property
    def rate_client_burst(self) -> int: ...
    @property
    def request_deadline_s(self) -> float: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def body_timeout_s(self) -> float: ...


def edge_policy(settings: EdgeSettings, service: str) -> EdgePolicy:
    """Build the edge policy of ``service`` from its settings.

    The public development key (``casestream.auth.tokens.DEV_JWT_KEY``, from the variable or
    the key file, trimmed or not: ``AuthSettings.uses_dev_key``) is refused when
    ``CASESTREAM_AUTO_REGISTER_SCHEMAS`` is false or ``CASESTREAM_ENV`` is ``production``,
    and logged as a warning otherwise.

    Raises:
        ConfigError: unusable key, or the development key in production.
    """
    if settings.auth.uses_dev_key:
        if not settings.auto_register_schemas or getattr(settings, "env", None) == "production":
            raise ConfigError(f"{service}: {settings.auth.key_source} holds the public "
                              "development key; set a key of your own in production")
        log.warning("%s: bearer tokens are verified with the public development key "
                    "(set CASESTREAM_AUTH_JWT_KEY for anything but local use)", service)
    return EdgePolicy(
        verifier=TokenVerifier(settings.auth), max_in_flight=settings.max_in_flight,
        per_tenant=RateLimit(rate_per_s=settings.rate_tenant_per_s,
                             burst=settings.rate_tenant_burst),
        per_client=RateLimit(rate_per_s=settings.rate_client_per_s,
                             burst=settings.rate_client_burst),
        deadline_s=settings.request_deadline_s,
        body=BodyLimits(max_bytes=settings.max_body_bytes,
                        read_timeout_s=settings.body_timeout_s))
