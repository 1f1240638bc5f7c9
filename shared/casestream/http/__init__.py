"""The shared HTTP edge of the casestream services (starlette / pure ASGI middlewares).

The error boundary (``boundary``: every failure a problem+json answer), request bodies
read whole before a slot is taken (the caller authenticated from its headers first, anonymous
bodies on a small budget), bounded in size, media type and time, and parsed as
strict JSON (``body``, ``jsonbody``), request models (``models``: pydantic bodies and
query strings, errors naming each field; lazily re-exported: pydantic), OpenAPI documents
built from those models (``openapi``, lazily re-exported),
Bearer-token authentication and role checks (``authn``), load shedding (``shedding``),
per-tenant and per-client rate limiting (``ratelimit``), ``Idempotency-Key`` on write routes
(``idempotency``; its PostgreSQL store ``pgidempotency``, lazily re-exported: psycopg),
request deadlines (``deadline``,
and ``pgdeadline`` for PostgreSQL), problem+json answers and the list routes' ``limit``
parameter (``problem``), counters,
``edge`` which assembles them in order for a service's app, and ``app`` (imported on its
own: the app behind the edge, its 404/405 handler, the 503 guard around blocking reads).
``edge_app``/``guarded`` (app) and ``DeadlinePool`` (pgdeadline: psycopg) are re-exported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

from casestream.http.authn import (
    PUBLIC_PATHS,
    AuthAnswer,
    BearerAuthMiddleware,
    answer_for,
    forbidden,
    principal_of,
    requires,
    unauthorized,
)
from casestream.http.body import BodyAuthenticate, BodyLimits, JsonBodyMiddleware, RequestBodyMiddleware
from casestream.http.boundary import ErrorBoundaryMiddleware
from casestream.http.counters import EdgeCounters
from casestream.http.deadline import (
    Deadline,
    DeadlineExceeded,
    DeadlineMiddleware,
    current_deadline,
    deadline_scope,
)
from casestream.http.edge import EdgePolicy, bearer_gate, edge_middleware, edge_policy
from casestream.http.idempotency import (
    DEFAULT_TTL,
    IDEMPOTENCY_HEADER,
    KEY_MAX,
    KEY_PATTERN,
    REPLAYED_HEADER,
    Idempotency,
    IdempotencyConflict,
    IdempotencyCounters,
    IdempotencyRecord,
    IdempotencyScope,
    IdempotencyStore,
    IdempotentRequest,
    InMemoryIdempotencyStore,
    RequestInFlight,
    StoredResponse,
    fingerprint,
    hash_key,
    idempotency_key_of,
)
from casestream.http.jsonbody import parse_json
from casestream.http.problem import PROBLEM_JSON, HttpProblem, limit_param, problem_response
from casestream.http.ratelimit import RateLimit, RateLimiter, RateLimitMiddleware
from casestream.http.shedding import LoadShedMiddleware

if TYPE_CHECKING:
    from casestream.http.app import edge_app, guarded
    from casestream.http.models import (
        BLANK,
        TEXT_PATTERN,
        Identifier,
        Limit,
        body_is_empty,
        body_model,
        field_message,
        json_body,
        query_model,
        text,
        validate,
    )
    from casestream.http.openapi import (
        PROBLEM_SCHEMA,
        RATE_LIMITED_SCHEMA,
        RETRY_AFTER,
        Operation,
        json_answer,
        openapi_document,
        openapi_route,
        problem_answer,
        query_parameters,
    )
    from casestream.http.pgdeadline import DeadlinePool
    from casestream.http.pgidempotency import (
        IDEMPOTENCY_MIGRATION,
        IDEMPOTENCY_MIGRATIONS,
        IDEMPOTENCY_TABLE,
        PgIdempotencyStore,
        idempotency_purge_worker,
    )

# Lazy: pgdeadline imports psycopg; app is imported on its own (see above).
_LAZY = {"edge_app": "casestream.http.app", "guarded": "casestream.http.app",
         "DeadlinePool": "casestream.http.pgdeadline",
         **{name: "casestream.http.pgidempotency" for name in (
             "IDEMPOTENCY_MIGRATION", "IDEMPOTENCY_MIGRATIONS", "IDEMPOTENCY_TABLE",
             "PgIdempotencyStore", "idempotency_purge_worker")},
         **{name: "casestream.http.models" for name in (
             "BLANK", "TEXT_PATTERN", "Identifier", "Limit", "body_is_empty", "body_model",
             "field_message",
             "json_body", "query_model", "text", "validate")},
         **{name: "casestream.http.openapi" for name in (
             "PROBLEM_SCHEMA", "RATE_LIMITED_SCHEMA", "RETRY_AFTER", "Operation", "json_answer",
             "openapi_document", "openapi_route", "problem_answer", "query_parameters")}}

__all__ = [
    "AuthAnswer", "DeadlinePool", "answer_for", "edge_app", "guarded",
    "PUBLIC_PATHS", "PROBLEM_JSON", "BearerAuthMiddleware", "Deadline", "DeadlineExceeded",
    "DeadlineMiddleware", "EdgeCounters", "EdgePolicy", "LoadShedMiddleware", "RateLimit",
    "RateLimitMiddleware", "RateLimiter", "current_deadline", "deadline_scope",
    "edge_middleware", "edge_policy", "forbidden", "limit_param", "principal_of",
    "problem_response", "requires", "unauthorized",
    "BodyAuthenticate", "BodyLimits", "ErrorBoundaryMiddleware", "HttpProblem", "JsonBodyMiddleware",
    "bearer_gate",
    "RequestBodyMiddleware", "parse_json",
    "BLANK", "TEXT_PATTERN", "Identifier", "Limit", "body_is_empty", "body_model",
    "field_message", "json_body",
    "query_model", "text", "validate",
    "PROBLEM_SCHEMA", "RATE_LIMITED_SCHEMA", "RETRY_AFTER", "Operation", "json_answer",
    "openapi_document", "openapi_route", "problem_answer", "query_parameters",
    "DEFAULT_TTL", "IDEMPOTENCY_HEADER", "KEY_MAX", "KEY_PATTERN", "REPLAYED_HEADER",
    "Idempotency", "IdempotencyConflict", "IdempotencyCounters", "IdempotencyRecord",
    "IdempotencyScope", "IdempotencyStore", "IdempotentRequest", "InMemoryIdempotencyStore",
    "RequestInFlight", "StoredResponse", "fingerprint", "hash_key", "idempotency_key_of",
    "IDEMPOTENCY_MIGRATION", "IDEMPOTENCY_MIGRATIONS", "IDEMPOTENCY_TABLE", "PgIdempotencyStore",
    "idempotency_purge_worker",
]


__getattr__ = lazy_exports(__name__, _LAZY, globals())
