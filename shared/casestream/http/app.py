"""What every service's starlette app shares around its own routes.

- :func:`edge_app`: the app behind the shared edge (``edge_middleware``), with
  :func:`http_error` for starlette's own 404/405, :class:`~casestream.http.problem.HttpProblem`
  raised by a route rendered as its problem, and ``app.state.counters``;
- :func:`guarded`: runs a blocking read in the thread pool and turns a passed request
  deadline or storage trouble into a 503 problem with ``Retry-After: 1``.

Problem bodies are those of :func:`casestream.http.problem.problem_response`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from casestream.http.counters import EdgeCounters
from casestream.http.deadline import DeadlineExceeded
from casestream.http.edge import EdgePolicy, edge_middleware
from casestream.http.problem import HttpProblem, problem_response

T = TypeVar("T")

_RETRY_SOON = {"Retry-After": "1"}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's ``HTTPException`` (unknown path 404, wrong method 405, ...) as a problem:
    code ``not_found`` / ``method_not_allowed`` / ``http_error``, the exception's headers
    (``Allow`` on a 405) kept."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem_response(exc.status_code, code, str(exc.detail),
                            f"{request.method} {request.url.path}: {exc.detail}",
                            instance=request.url.path, headers=headers or None)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at this path (RFC 9110 §10.2.1 ``Allow``),
    also when several routes share the path (starlette's own 405 names the first one's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


async def http_problem(request: Request, exc: Exception) -> Response:
    """An :class:`HttpProblem` raised by a route, as its problem response."""
    assert isinstance(exc, HttpProblem)
    return exc.response(request.url.path)


def edge_app(routes: Sequence[BaseRoute], edge: EdgePolicy) -> Starlette:
    """A starlette app serving ``routes`` behind ``edge`` (health routes are added by
    ``ServiceProcess``); ``app.state.counters`` holds the edge's :class:`EdgeCounters`."""
    handler: Callable[[Request, Exception], Awaitable[Response]] = http_error
    problem: Callable[[Request, Exception], Awaitable[Response]] = http_problem
    counters = EdgeCounters()
    app = Starlette(routes=list(routes), middleware=edge_middleware(edge, counters),
                    exception_handlers={HTTPException: handler, HttpProblem: problem})
    app.state.counters = counters
    return app


async def guarded(request: Request, work: Callable[[], T], *, unavailable: str,
                  log: logging.Logger,
                  passthrough: tuple[type[Exception], ...] = ()) -> T | Response:
    """``work()`` run in the thread pool, or the 503 problem that answers its failure.

    Args:
        unavailable: the ``detail`` of a ``service_unavailable`` answer, e.g. ``"the
            decision store could not be read; retry later"``.
        log: the route module's logger; any other exception is logged there with its
            traceback, and the client gets no details.
        passthrough: exceptions the route answers itself (re-raised unchanged).

    Returns:
        ``work()``'s result, or a 503 ``deadline_exceeded`` / ``service_unavailable``
        problem (``Retry-After: 1``): check with ``isinstance(result, Response)``.
    """
    path = request.url.path
    try:
        return await run_in_threadpool(work)
    except DeadlineExceeded:
        return problem_response(503, "deadline_exceeded", "Request deadline exceeded",
                                "the request ran out of time; retry later", instance=path,
                                headers=_RETRY_SOON)
    except passthrough:
        raise
    except Exception:  # noqa: BLE001 - error boundary: log, answer without details
        log.exception("unhandled error on %s %s", request.method, path)
        return problem_response(503, "service_unavailable", "Service temporarily unavailable",
                                unavailable, instance=path, headers=_RETRY_SOON)
