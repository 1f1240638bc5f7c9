"""The outermost error boundary of a service's app: every failure answered as a problem.

:class:`ErrorBoundaryMiddleware` catches what a route or middleware lets escape:

- :class:`~casestream.http.problem.HttpProblem` -> its own problem response;
- a client gone (``starlette.requests.ClientDisconnect``, or ``OSError`` once the
  response started, i.e. the connection closed under it) -> nothing sent, counted in
  ``EdgeCounters.client_disconnects``, logged at DEBUG: a client hanging up is not an
  error of the service;
- anything else -> logged once with its traceback (logger ``casestream.http.boundary``)
  and answered 500 ``internal_error`` as ``application/problem+json`` without details,
  if the response has not started (else the connection is closed by the server).

Nothing is re-raised to the server, so uvicorn logs no second traceback.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from casestream.http.counters import EdgeCounters
from casestream.http.problem import HttpProblem, problem_response

log = logging.getLogger(__name__)


class ErrorBoundaryMiddleware:
    """See module docstring.

    Args:
        app: the wrapped ASGI app.
        counters: ``client_disconnects`` and ``internal_errors`` are incremented.
    """

    def __init__(self, app: ASGIApp, *, counters: EdgeCounters | None = None) -> None:
        self.app = app
        self._counters = counters or EdgeCounters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except HttpProblem as problem:
            if not started:
                await problem.response(scope["path"])(scope, receive, send)
        except ClientDisconnect:
            self._gone(scope)
        except OSError:
            if not started:
                raise
            self._gone(scope)
        except Exception:  # noqa: BLE001 - the boundary: log once, answer without details
            self._counters.internal_errors += 1
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            if not started:
                await problem_response(500, "internal_error", "Internal server error",
                                       "an unexpected error occurred; it has been logged",
                                       instance=scope["path"])(scope, receive, send)

    def _gone(self, scope: Scope) -> None:
        self._counters.client_disconnects += 1
        log.debug("%s %s: client disconnected", scope["method"], scope["path"])
