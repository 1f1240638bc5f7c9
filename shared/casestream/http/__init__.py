"""The shared HTTP edge of the casestream services (starlette / pure ASGI middlewares).

Bearer-token authentication and role checks (``authn``), load shedding (``shedding``),
per-tenant and per-client rate limiting (``ratelimit``), request deadlines (``deadline``,
and ``pgdeadline`` for PostgreSQL), problem+json answers (``problem``), counters,
``edge`` which assembles them in order for a service's app, and ``app`` (imported on its
own: the app behind the edge, its 404/405 handler, the 503 guard around blocking reads).
"""

from casestream.http.authn import (
    PUBLIC_PATHS,
    BearerAuthMiddleware,
    forbidden,
    principal_of,
    requires,
    unauthorized,
)
from casestream.http.counters import EdgeCounters
from casestream.http.deadline import (
    Deadline,
    DeadlineExceeded,
    DeadlineMiddleware,
    current_deadline,
    deadline_scope,
)
from casestream.http.edge import EdgePolicy, edge_middleware, edge_policy
from casestream.http.problem import PROBLEM_JSON, problem_response
from casestream.http.ratelimit import RateLimit, RateLimiter, RateLimitMiddleware
from casestream.http.shedding import LoadShedMiddleware

__all__ = [
    "PUBLIC_PATHS", "PROBLEM_JSON", "BearerAuthMiddleware", "Deadline", "DeadlineExceeded",
    "DeadlineMiddleware", "EdgeCounters", "EdgePolicy", "LoadShedMiddleware", "RateLimit",
    "RateLimitMiddleware", "RateLimiter", "current_deadline", "deadline_scope",
    "edge_middleware", "edge_policy", "forbidden", "principal_of", "problem_response", "requires",
    "unauthorized",
]
