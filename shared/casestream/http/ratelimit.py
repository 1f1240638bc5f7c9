"""Rate limiting per tenant and per client: token buckets, and the middleware answering 429.

Each tenant and each (tenant, client) pair has a bucket of ``burst`` tokens refilled at
``rate_per_s``; a request takes one token from both (or from neither). When either is
empty the answer is 429 ``rate_limited`` with ``Retry-After`` (whole seconds, rounded
up, RFC 9110 §10.2.3) and the same value as ``retry_after_seconds`` in the problem body.
Buckets live in this process (limits are per process); idle buckets are evicted least
recently used beyond ``max_keys``. Runs after authentication: the principal names the
tenant and client; unauthenticated requests never reach it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from casestream.auth.tokens import Principal
from casestream.http.counters import EdgeCounters
from casestream.http.problem import problem_response

Clock = Callable[[], float]
"""Monotonic seconds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """A sustained rate (requests per second, > 0) and a burst (bucket size, >= 1)."""

    rate_per_s: float
    burst: int

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.burst < 1:
            raise ValueError(f"invalid rate limit {self.rate_per_s}/s burst {self.burst}")


@dataclass(slots=True)
class TokenBucket:
    """One bucket: ``tokens`` available at monotonic time ``updated``."""

    limit: RateLimit
    tokens: float
    updated: float

    def refill(self, now: float) -> None:
        """Add the tokens earned since ``updated`` (capped at ``burst``)."""
        if now > self.updated:
            self.tokens = min(float(self.limit.burst),
                              self.tokens + (now - self.updated) * self.limit.rate_per_s)
            self.updated = now

    def wait_s(self) -> float:
        """Seconds until one token is available (0 if one is now)."""
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.limit.rate_per_s


class RateLimiter:
    """Per-tenant and per-client buckets (either limit may be None = unlimited).

    Not thread-safe: used from the event loop only.
    """

    def __init__(self, *, per_tenant: RateLimit | None, per_client: RateLimit | None,
                 clock: Clock = time.monotonic, max_keys: int = 10_000) -> None:
        self._per_tenant = per_tenant
        self._per_client = per_client
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def acquire(self, tenant: str, client: str) -> tuple[str, float] | None:
        """Take a token for one request; None if allowed.

        Returns:
            ``(scope, seconds)`` when refused: which limit (``"tenant"`` or ``"client"``,
            the one with the longer wait) and the seconds until a retry can succeed.
        """
        now = self._clock()
        buckets = []
        if self._per_tenant is not None:
            buckets.append(("tenant", self._bucket(("t", tenant), self._per_tenant, now)))
        if self._per_client is not None:
            buckets.append(("client", self._bucket(("c", tenant, client), self._per_client, now)))
        refused = [(b.wait_s(), name) for name, b in buckets if b.tokens < 1]
        if refused:
            wait, name = max(refused)
            return name, wait
        for _, bucket in buckets:
            bucket.tokens -= 1
        return None

    def _bucket(self, key: Hashable, limit: RateLimit, now: float) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(limit=limit, tokens=float(limit.burst), updated=now)
            self._buckets[key] = bucket
            while len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            bucket.refill(now)
        return bucket


def retry_after_seconds(wait_s: float) -> int:
    """``Retry-After`` value for a wait: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_s))


class RateLimitMiddleware:
    """Answer 429 when the principal's tenant or client bucket is empty (module docstring).

    Args:
        app: the wrapped ASGI app (behind authentication).
        limiter: the buckets.
        counters: ``rate_limited`` is incremented per 429.
    """

    def __init__(self, app: ASGIApp, *, limiter: RateLimiter,
                 counters: EdgeCounters | None = None) -> None:
        self.app = app
        self._limiter = limiter
        self._counters = counters or EdgeCounters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        if not isinstance(principal, Principal):
            await self.app(scope, receive, send)
            return
        refused = self._limiter.acquire(principal.tenant_id, principal.client_id)
        if refused is None:
            await self.app(scope, receive, send)
            return
        which, wait = refused
        seconds = retry_after_seconds(wait)
        self._counters.rate_limited += 1
        response = problem_response(
            429, "rate_limited", "Too many requests",
            f"request rate limit of this {which} exceeded; retry after {seconds} s",
            instance=scope["path"], headers={"Retry-After": str(seconds)},
            extra={"retry_after_seconds": seconds, "limit_scope": which})
        await response(scope, receive, send)
