"""HTTP side of telemetry: a tracing ASGI middleware and the Prometheus ``/metrics`` route.

Driver module (starlette, opentelemetry). The middleware opens a SERVER span per request,
child of the request's W3C ``traceparent`` header (else a new trace), named
``<METHOD> <route path template>`` when the route is known, else ``<METHOD>`` alone, and
records ``http_server_duration_seconds{method,status}`` (status as a class: ``2xx``...).
Whatever a client sends, the label values stay bounded: a method outside
:data:`KNOWN_METHODS` is ``_OTHER`` (OpenTelemetry HTTP semantic conventions,
``http.request.method``; the span keeps the original in ``http.request.method_original``),
and no raw path reaches a label or a span name. The probe routes ``/healthz``,
``/readyz``, ``/readyz/consumers`` and ``/metrics`` are neither traced nor timed.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from casestream.telemetry.core import current
from casestream.telemetry.metrics import CONTENT_TYPE
from casestream.telemetry.tracing import context_from_traceparent

__all__ = ["TracingMiddleware", "metrics_route", "UNTRACED_PATHS", "KNOWN_METHODS",
           "method_label"]

UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/readyz/consumers", "/metrics"})
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS",
                           "TRACE", "PATCH"})
"""RFC 9110 §9 methods and PATCH (RFC 5789): the method label's values, with ``_OTHER``."""
OTHER_METHOD = "_OTHER"


def method_label(method: str) -> str:
    """``method`` if it is one of :data:`KNOWN_METHODS`, else ``_OTHER``."""
    return method if method in KNOWN_METHODS else OTHER_METHOD


class TracingMiddleware:
    """ASGI middleware: SERVER span + duration histogram per HTTP request.

    With ``serve_metrics`` it also answers ``GET /metrics`` itself, in front of the app's own
    middleware (authentication, rate limits, load shedding): a scrape needs no token and is
    never shed. The exposition holds no ids and no personal data.
    """

    def __init__(self, app: ASGIApp, *, serve_metrics: bool = False) -> None:
        self.app = app
        self._metrics = metrics_route() if serve_metrics else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._metrics is not None and scope["type"] == "http" and scope.get("path") == "/metrics":
            await self._metrics.handle(scope, receive, send)
            return
        if scope["type"] != "http" or scope.get("path") in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        tel = current()
        raw_method = scope.get("method", "GET")
        method = method_label(raw_method)
        traceparent = None
        for k, v in scope.get("headers") or []:
            if k == b"traceparent":
                traceparent = v.decode("latin-1")
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        started = time.monotonic()
        attributes = {"http.request.method": method, "url.path": scope.get("path", ""),
                      "url.scheme": scope.get("scheme", "http"), "service.component": "http"}
        if method != raw_method:
            attributes["http.request.method_original"] = raw_method[:64]
        with tel.tracer.start_as_current_span(
                "HTTP" if method == OTHER_METHOD else method,
                context=context_from_traceparent(traceparent), kind=SpanKind.SERVER,
                attributes=attributes) as span:
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                route = _route_template(scope)
                if route and method != OTHER_METHOD:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                tel.metrics.record("http_server_duration_seconds", time.monotonic() - started,
                                   {"method": method, "status": f"{status[0] // 100}xx"})


def _route_template(scope: Scope) -> str | None:
    route: Any = scope.get("route")
    return getattr(route, "path", None)


def metrics_route() -> Route:
    """``GET /metrics``: this process's metrics in Prometheus text format 0.0.4
    (``prometheus_client.generate_latest``). A plain function, so Starlette runs it in its
    thread pool: the scrape-time callbacks (SQL gauges) do not block the event loop."""

    def metrics(_: Request) -> Response:
        return Response(current().metrics.exposition(), media_type=CONTENT_TYPE)

    return Route("/metrics", metrics)
