"""Wiring of the audit service — the only place that builds adapters.

``build()`` reads :class:`AuditSettings`, applies ``migrations/*.sql`` (journal with its
append-only triggers, timeline projection), prepares the codec, and returns a
:class:`~casestream.service.process.ServiceProcess`:

- HTTP: ``GET /audit/cases/{id}`` + ``/healthz`` ``/readyz``, behind the shared edge
  (bearer tokens, load shedding, rate limits, request deadlines: ``casestream.http``);
- worker ``consumer``: consumer ``audit.journal`` on the four event topics, one
  ``PROJECTION`` handler per catalog event type.

The audit service emits no events, so it has no outbox table and no relay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from casestream.service import wiring
from casestream.migrations import Migration
from casestream.http import DeadlinePool
from casestream.service import ServiceProcess
from services.audit.adapters import handlers
from services.audit.adapters.http import build_app
from services.audit.adapters.postgres import PgTimelineReader
from services.audit.domain.entries import KNOWN_EVENT_TYPES
from services.audit.settings import AuditSettings

NAME = "audit"
MIGRATIONS = Path(__file__).parent / "migrations"


def migrations() -> list[Migration | Path]:
    """This service's ``migrations/*.sql`` in name order (no outbox: it emits no events)."""
    return wiring.service_migrations(MIGRATIONS, outbox=False)


def build(settings: AuditSettings | None = None) -> ServiceProcess:
    """Build the audit service process (see the module docstring).

    Raises:
        ConfigError: the database is unreachable or a setting is invalid.
        casestream.errors.SchemaError / RegistryUnavailable: the codec cannot be prepared.
    """
    settings = settings or wiring.read_settings(AuditSettings, NAME)
    base = wiring.groundwork(settings, NAME, migrations())
    codec = base.codec

    pool: ConnectionPool[Any] = ConnectionPool(
        settings.dsn, min_size=settings.pool_min, max_size=max(settings.pool_min + 1,
                                                                settings.pool_max),
        timeout=settings.pool_timeout_s, open=True, name="audit",
        kwargs={"application_name": NAME})
    registry = handlers.build_registry(
        event_types={*KNOWN_EVENT_TYPES, *base.catalog.event_types})
    consumer = wiring.consumer_runtime(handlers, registry, codec, pool, settings,
                                       batch_size=settings.batch_size)

    reader = PgTimelineReader(DeadlinePool(pool))
    return ServiceProcess(name=NAME, app=build_app(reader, edge=base.edge), host=settings.host,
                          port=settings.port, workers={"consumer": consumer.run},
                          readiness=wiring.readiness(pool, "case_timeline", consumer, settings),
                          closers=[codec.close, pool.close])
