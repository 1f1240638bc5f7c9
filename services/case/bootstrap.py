"""Wiring of the case service — the only place that builds adapters.

``build()`` reads :class:`CaseSettings`, applies the migrations (outbox DDL, then
``migrations/*.sql``), prepares the codec (registers schemas in development, looks ids up
in production), and returns a :class:`~casestream.service.process.ServiceProcess`:

- HTTP: the case API (``services.case.adapters.http.app``) + ``/healthz`` ``/readyz``,
  behind the shared edge (bearer tokens, load shedding, rate limits, request deadlines:
  ``casestream.http``); HTTP use cases draw connections through ``DeadlinePool``;
- worker ``consumer``: consumer ``case.saga-requests`` on ``outbox.event.saga``;
- worker ``relay``: the outbox relay of the case database (off when Debezium publishes);
- worker ``idempotency-purge``: deletes expired idempotency records periodically.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from casestream.service import wiring
from casestream.events import Catalog
from casestream.migrations import Migration
from casestream.consumer import HandlerRegistry
from casestream.http import DeadlinePool
from casestream.outbox import OutboxWriter
from casestream.service import ServiceProcess, Worker
from casestream.telemetry import dependency_checks
from services.case.adapters import dashboard, saga_requests
from services.case.adapters.http.app import build_app
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application.service import CaseService
from services.case.settings import CaseSettings

NAME = "case"
MIGRATIONS = Path(__file__).parent / "migrations"

log = logging.getLogger(__name__)


class SystemClock:
    """``Clock`` port: timezone-aware UTC now."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return wiring.service_migrations(MIGRATIONS)


def consumer_registry(service: CaseService, catalog: Catalog) -> HandlerRegistry:
    """Handlers of ``case.saga-requests``; every other event type of its topics is ignored."""
    registry = saga_requests.build_registry(service)
    others = [t for t in catalog.event_types
              if catalog.subject_for(t).topic in saga_requests.TOPICS and not registry.knows(t)]
    registry.ignore(*others)
    return registry


def purge_worker(service: CaseService, interval_s: float) -> Worker:
    """A worker deleting expired idempotency records every ``interval_s`` seconds."""

    def run(stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            try:
                while service.purge_idempotency_records(limit=1000) == 1000 and not stop.is_set():
                    pass
            except Exception:  # noqa: BLE001 - a failed purge is retried next period
                log.warning("idempotency purge failed; retrying in %.0f s", interval_s,
                            exc_info=True)

    return run


def build(settings: CaseSettings | None = None) -> ServiceProcess:
    """Build the case service process (see the module docstring).

    Raises:
        ConfigError: the database is unreachable or a setting is invalid.
        casestream.errors.SchemaError / RegistryUnavailable: the codec cannot be prepared.
    """
    settings = settings or wiring.read_settings(CaseSettings, NAME)
    base = wiring.groundwork(settings, NAME, migrations())
    catalog, codec = base.catalog, base.codec

    pool: ConnectionPool[Any] = ConnectionPool(
        settings.dsn, min_size=settings.pool_min, max_size=max(settings.pool_min, settings.pool_max),
        timeout=settings.pool_timeout_s, open=True, name="case",
        kwargs={"application_name": NAME})
    writer = OutboxWriter(codec)
    service = CaseService(uow=PgUnitOfWork.factory(DeadlinePool(pool), writer.append),
                          clock=SystemClock(),
                          new_id=lambda: str(uuid.uuid4()),
                          idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_s))

    workers: dict[str, Worker] = {
        "idempotency-purge": purge_worker(service, settings.purge_interval_s)}
    readiness: dict[str, Callable[[], None]] = {}

    readiness["postgres"] = wiring.database_ready(pool, "cases")
    checks = dependency_checks(settings.kafka_bootstrap, settings.registry_url)
    readiness["registry"] = checks["registry"]
    if settings.consumer_enabled or settings.relay_enabled:
        readiness["kafka"] = checks["kafka"]
    if settings.consumer_enabled:
        consumer = wiring.consumer_runtime(saga_requests, consumer_registry(service, catalog),
                                           codec, pool, settings, outbox=writer)
        workers["consumer"] = consumer.run
        readiness["consumer"] = wiring.consumer_ready(consumer)

        # the case dashboard read model (rebuildable with `casestream replay case.dashboard`)
        with pool.connection() as conn:
            dashboard.create_tables(conn, dashboard.PROJECTION.live_names())
        dashboard_consumer = wiring.consumer_runtime(
            dashboard, dashboard.registry(dashboard.PROJECTION.live_names(), catalog.event_types),
            codec, pool, settings, batch_size=500)
        workers["dashboard"] = dashboard_consumer.run
    if settings.relay_enabled:
        workers["relay"] = wiring.outbox_relay(pool, settings, NAME).run

    app = build_app(service, edge=base.edge, max_body_bytes=settings.max_body_bytes)
    return ServiceProcess(name=NAME, app=app,
                          host=settings.host, port=settings.port, workers=workers,
                          readiness=readiness, closers=[codec.close, pool.close])
