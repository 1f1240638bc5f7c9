"""Run one casestream service as a process: HTTP app plus background workers.

A service process is uvicorn serving a starlette app in the main thread, and a set of
workers (outbox relay, consumer runtimes, schedulers) each in its own thread, sharing one
``threading.Event`` that tells them to stop. SIGTERM or SIGINT stops uvicorn; the
workers are then told to stop and joined, so a relay flushes its producer and a consumer
commits its finished batch before the process exits. A worker that dies with an exception,
or returns before it was told to stop, stops the whole process with exit status 1: a supervisor restarts it, and nothing
half-done is committed (offsets are committed only after the database transaction).
"""

from __future__ import annotations

import concurrent.futures.thread as cf_thread
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from casestream import telemetry
from casestream.errors import CasestreamError, ConfigError
from casestream.telemetry.http import TracingMiddleware
from casestream.telemetry.logs import JsonFormatter
from casestream.telemetry.settings import TelemetrySettings

if TYPE_CHECKING:
    from casestream.service.spec import ServiceSpec

Worker = Callable[[threading.Event], None]
"""A long-running loop that returns soon after its stop event is set."""

ReadinessCheck = Callable[[], None]
"""Raises any exception when its dependency is not reachable; returns None when it is."""

log = logging.getLogger("casestream.service")

_QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "uvicorn.error")


class _Server(uvicorn.Server):
    """uvicorn's server, told not to re-raise SIGTERM/SIGINT after it has shut down.

    uvicorn re-raises a captured signal when ``run()`` returns (so a bare uvicorn process
    dies of it); we still have workers to stop — a relay to flush, offsets to commit — so
    the signal only asks for shutdown, and ``on_signal`` starts the workers' stop at once.
    """

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]):
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: object) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
        self._on_signal()


def configure_logging(service: str, level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Send log records to stderr, one line each.

    ``json_lines`` (default: ``CASESTREAM_TELEMETRY_LOG_FORMAT``, ``json`` unless ``text``):
    one JSON object per line (``casestream.telemetry.logs.JsonFormatter``: timestamp, level,
    service, trace_id, correlation_id, event_id, ...); otherwise text prefixed with the
    service name.
    """
    if json_lines is None:
        json_lines = TelemetrySettings().log_format.lower() != "text"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter(service) if json_lines else
        logging.Formatter(f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _QUIET_LOGGERS:  # one line per registry call or request is noise at INFO
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def health_routes(readiness: Mapping[str, ReadinessCheck],
                  consumption: Mapping[str, ReadinessCheck] | None = None) -> list[Route]:
    """Return ``/healthz`` (process alive, always 200), ``/readyz`` and ``/readyz/consumers``.

    ``/readyz`` (``readiness``: can the service take commands — its database and outbox)
    and ``/readyz/consumers`` (``consumption``: Kafka, each consumer assigned and not stalled)
    run their checks and answer 200 ``{"status": "ready"}`` or 503 with
    ``{"status": "not_ready", "failing": {name: reason}}`` naming each dependency down. The
    two are separate so a load balancer or Kubernetes readiness probe keeps routing commands
    to a service whose outbox buffers them while Kafka is away.
    """

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "alive"})

    def answer(checks: Mapping[str, ReadinessCheck]) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def probe(_: Request) -> JSONResponse:
            failing: dict[str, str] = {}
            for name, check in checks.items():
                try:
                    await run_in_threadpool(check)  # checks block (bounded by their timeouts)
                except Exception as e:  # noqa: BLE001 - any failure means "not ready"
                    failing[name] = f"{type(e).__name__}: {e}"[:300]
            if failing:
                return JSONResponse({"status": "not_ready", "failing": failing}, status_code=503)
            return JSONResponse({"status": "ready"})

        return probe

    return [Route("/healthz", healthz), Route("/readyz", answer(readiness)),
            Route("/readyz/consumers", answer(consumption or {}))]


@dataclass(slots=True, kw_only=True)
class ServiceProcess:
    """One service: ``app`` served on ``host:port`` plus ``workers`` in threads.

    Attributes:
        name: service name, used in logs and thread names.
        app: the starlette application (``/healthz`` and ``/readyz`` are added to it). It is
            served behind ``casestream.telemetry.http.TracingMiddleware``, which also answers
            ``/metrics`` (Prometheus text, no token needed); ``app.state.counters``, if set,
            is exported there.
        host, port: where uvicorn listens.
        workers: named worker loops, each run in its own daemon thread.
        readiness: checks served at ``/readyz``: can the service take commands (database,
            outbox, registry).
        consumption: checks served at ``/readyz/consumers``: Kafka and the consumers; they
            never gate ``/readyz`` (the outbox holds events while Kafka is away).
        shutdown_timeout_s: how long to wait for each worker to stop, in seconds.
        http_drain_s: seconds uvicorn waits for requests in flight at shutdown before it
            closes their connections (uvicorn's ``timeout_graceful_shutdown``).
        closers: called in order after every worker has stopped (connection pools,
            the schema registry client); a closer's failure is logged, not raised.
        listener: a listening socket to serve on instead of binding ``host:port`` (a
            worker process's, inherited from its supervisor: :mod:`casestream.service.workers`).
    """

    name: str
    app: Starlette
    host: str
    port: int
    workers: Mapping[str, Worker] = field(default_factory=dict)
    readiness: Mapping[str, ReadinessCheck] = field(default_factory=dict)
    consumption: Mapping[str, ReadinessCheck] = field(default_factory=dict)
    shutdown_timeout_s: float = 30.0
    closers: Sequence[Callable[[], None]] = ()
    http_drain_s: float = 5.0
    listener: socket.socket | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    _failed: list[str] = field(default_factory=list)

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT or a worker failure; return the exit status (0 or 1)."""
        try:
            tel = telemetry.install(self.name)  # exporters from OTEL_* / CASESTREAM_TELEMETRY_*
        except ConfigError as e:
            log.error("telemetry configuration: %s", e)
            return 2
        counters = getattr(self.app.state, "counters", None)
        if counters is not None:
            telemetry.sources().add_counters(self.name, counters)
        for route in health_routes(self.readiness, self.consumption):
            self.app.router.routes.append(route)
        server = _Server(
            uvicorn.Config(TracingMiddleware(self.app, serve_metrics=True), host=self.host,
                           port=self.port,
                           log_config=None,
                           access_log=False, lifespan="off",
                           timeout_graceful_shutdown=self.http_drain_s),
            on_signal=self.stop.set,
        )
        threads = [
            threading.Thread(target=self._guard, args=(name, worker, server),
                             name=f"{self.name}.{name}", daemon=True)
            for name, worker in self.workers.items()
        ]
        for thread in threads:
            thread.start()
        log.info("%s listening on http://%s:%d with workers %s",
                 self.name, self.host, self.port, ", ".join(self.workers) or "none")
        stuck: list[str] = []
        try:
            server.run(sockets=None if self.listener is None else [self.listener])
        finally:
            self.stop.set()
            deadline = time.monotonic() + self.shutdown_timeout_s  # one budget for all workers
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    log.error("worker %s did not stop within %.0f s", thread.name,
                              self.shutdown_timeout_s)
                    stuck.append(thread.name)
            for close in self.closers:
                try:
                    close()
                except Exception:
                    log.exception("closing %r failed", close)
        tel.shutdown()
        if self._failed:
            log.error("stopped because worker(s) failed: %s", ", ".join(self._failed))
            return 1
        if stuck:
            log.error("stopped with worker(s) still running: %s (their unfinished work is not "
                      "committed and will be redone)", ", ".join(stuck))
            return 1
        log.info("%s stopped cleanly", self.name)
        return 0

    def _guard(self, name: str, worker: Worker, server: uvicorn.Server) -> None:
        try:
            worker(self.stop)
        except ConfigError as e:  # a deployment mistake found while running: one line
            log.error("worker %s stopped: %s; stopping the process", name, e)
        except BaseException:  # noqa: BLE001 - any end of a worker thread ends the process
            log.exception("worker %s crashed; stopping the process", name)
        else:
            if self.stop.is_set():
                return
            # A worker loop only returns when told to stop: one that ends by itself would
            # leave the process alive and ready without its work being done.
            log.error("worker %s returned without being stopped; stopping the process", name)
        self._failed.append(name)
        self.stop.set()
        server.should_exit = True


def run_service(build: Callable[..., ServiceProcess], *, spec: ServiceSpec | None = None) -> NoReturn:
    """Entrypoint helper for ``__main__`` modules: build the process, run it, exit with its status.

    ``spec`` (the service's :class:`~casestream.service.ServiceSpec`): its settings class is
    read here, once, and passed to ``build(settings)``; without it ``build()`` reads them.
    With ``CASESTREAM_WORKERS`` = N > 1 (``spec`` needed: the HTTP host and port are in its
    settings) a :class:`~casestream.service.workers.Supervisor` binds the port and forks N
    worker processes; each runs ``build(settings)`` after the fork and serves on the
    inherited socket (with ``CASESTREAM_INSTANCE_ID``, worker ``i`` joins its groups as
    ``<id>-w<i>``); the supervisor exits 0 when every worker stopped cleanly after SIGTERM,
    1 when it gave up (crash loop) or a worker did not stop, 2 when a worker failed to start.

    Start-up errors from casestream (bad settings, missing schema ids, unreachable database)
    are printed as one line, without a traceback, and exit with status 2.

    A thread left running by an abandoned handler (blocked in an external call past the
    consumer's ``shutdown_grace_s``) would be joined at interpreter exit and keep the process
    alive until SIGKILL; the process then exits without waiting for it (``os._exit``, after
    flushing the logs): its work was already reported as not committed.
    """
    # lazy (start-up cost): settings pull pydantic and the client property checks
    from casestream.service.settings import CommonSettings, read_settings

    settings: Any = None
    try:
        if spec is not None:
            settings = read_settings(spec.settings_class(), spec.name)
            workers = settings.workers
        else:
            try:
                workers = read_settings(CommonSettings, "process").workers
            except ConfigError:
                workers = 1  # build() reads the settings again and names the service
            if workers > 1:
                raise ConfigError(f"CASESTREAM_WORKERS={workers} needs the service's ServiceSpec "
                                  "for the HTTP host and port: run_service(build, spec=SERVICE)")
    except CasestreamError as e:
        print(f"start-up failed: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if workers == 1:
        _serve(lambda: build() if settings is None else build(settings))
    assert spec is not None
    raise SystemExit(_supervise(build, spec, settings, workers))


def _supervise(build: Callable[..., ServiceProcess], spec: ServiceSpec, settings: Any, workers: int) -> int:
    """Bind the service's port, run ``workers`` worker processes under a Supervisor; its status."""
    # lazy (start-up cost): only a multi-worker instance loads the supervisor
    from casestream.service.workers import Supervisor, bind_listener

    configure_logging(spec.name, settings.log_level)
    try:
        listener = bind_listener(settings.host, settings.port)
    except OSError as e:
        print(f"start-up failed: cannot listen on {settings.host}:{settings.port}: {e}", file=sys.stderr)
        return 2
    log.info("%s: %d worker processes on http://%s:%d", spec.name, workers, settings.host,
             listener.getsockname()[1])

    def worker(index: int) -> int:
        own = settings
        if settings.instance_id:  # two members sharing a group.instance.id fence each other
            own = settings.model_copy(update={"instance_id": f"{settings.instance_id}-w{index}"})
        _serve(lambda: build(own), listener=listener)

    # the workers' stop budget (shutdown_timeout_s) after the HTTP drain, and a margin
    budget = settings.shutdown_grace_s + 15.0 + 5.0 + 5.0
    try:
        return Supervisor(spec.name, worker, workers, stop_budget_s=budget).run()
    finally:
        listener.close()


def _serve(build: Callable[[], ServiceProcess], *, listener: socket.socket | None = None) -> NoReturn:
    """Build the process (serving on ``listener`` if given), run it, exit with its status."""
    try:
        process = build()
    except CasestreamError as e:
        print(f"start-up failed: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if listener is not None:
        process.listener = listener
    status = process.run()
    # Joined at exit: non-daemon threads and every ThreadPoolExecutor worker (daemon or not:
    # concurrent.futures joins its own threads through threading._register_atexit).
    pooled = set(getattr(cf_thread, "_threads_queues", {}))
    left = [t.name for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive() and (not t.daemon or t in pooled)]
    if left:
        log.warning("exiting without waiting for thread(s) %s (abandoned at shutdown)",
                    ", ".join(left))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    raise SystemExit(status)
