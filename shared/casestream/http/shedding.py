"""Load shedding: beyond ``max_in_flight`` concurrent requests, answer 503 at once.

A request that cannot be served soon is refused immediately with ``Retry-After`` instead
of queueing in front of the thread pool or the database pool until it times out: an
overloaded service answers fast rather than letting requests queue into timeouts. The limit is per process: the count lives in this
middleware, on the event loop thread. Public probe paths (``/healthz``, ``/readyz``) are
never shed, so an overloaded process is not restarted for being busy.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from casestream.http.counters import EdgeCounters
from casestream.http.problem import problem_response

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/readyz/consumers"})


class LoadShedMiddleware:
    """Count in-flight HTTP requests; refuse with 503 ``overloaded`` past the limit.

    Args:
        app: the wrapped ASGI app.
        max_in_flight: requests served concurrently (>= 1); the next one is shed.
        retry_after_s: ``Retry-After`` of a shed answer, whole seconds.
        exempt_paths: never counted nor shed.
        counters: ``shed`` is incremented per 503.
    """

    def __init__(self, app: ASGIApp, *, max_in_flight: int, retry_after_s: int = 1,
                 exempt_paths: Collection[str] = PROBE_PATHS,
                 counters: EdgeCounters | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self._retry_after = str(max(1, retry_after_s))
        self._exempt = frozenset(exempt_paths)
        self._counters = counters or EdgeCounters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._exempt:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            self._counters.shed += 1
            response = problem_response(
                503, "overloaded", "Service overloaded",
                f"more than {self.max_in_flight} requests in progress; retry later",
                instance=scope["path"], headers={"Retry-After": self._retry_after})
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
