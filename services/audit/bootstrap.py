"""Wiring of the audit service — the only place that builds adapters.

``build()`` reads :class:`AuditSettings`, applies ``migrations/*.sql`` (journal with its
append-only triggers, timeline projection), prepares the codec, and returns a
:class:`~casestream.service.ServiceProcess`:

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

from casestream import wiring
from casestream.catalog import load_catalog
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.http.edge import edge_policy
from casestream.http.pgdeadline import DeadlinePool
from casestream.service import ServiceProcess, configure_logging
from casestream.telemetry.readiness import dependency_checks
from services.audit.adapters import handlers
from services.audit.adapters.http import build_app
from services.audit.adapters.postgres import PgTimelineReader
from services.audit.domain.entries import KNOWN_EVENT_TYPES
from services.audit.settings import AuditSettings

NAME = "audit"
MIGRATIONS = Path(__file__).parent / "migrations"


def migrations() -> list[Path]:
    """This service's ``migrations/*.sql`` in name order."""
    return sorted(MIGRATIONS.glob("*.sql"))


def build(settings: AuditSettings | None = None) -> ServiceProcess:
    """Build the audit service process (see the module docstring).

    Raises:
        ConfigError: the database is unreachable or a setting is invalid.
        casestream.errors.SchemaError / RegistryUnavailable: the codec cannot be prepared.
    """
    settings = settings or AuditSettings()
    configure_logging(NAME, settings.log_level)
    edge = edge_policy(settings, NAME)
    wiring.migrate(settings.dsn, migrations(), service=NAME)
    catalog = load_catalog()
    codec = wiring.prepared_codec(settings, catalog)

    pool: ConnectionPool[Any] = ConnectionPool(
        settings.dsn, min_size=settings.pool_min, max_size=max(settings.pool_min + 1,
                                                                settings.pool_max),
        timeout=settings.pool_timeout_s, open=True, name="audit",
        kwargs={"application_name": NAME})
    registry = handlers.build_registry(event_types={*KNOWN_EVENT_TYPES, *catalog.event_types})
    consumer = ConsumerRuntime(handlers.CONSUMER, handlers.TOPICS, registry, codec, pool,
                               settings.consumer_config(),
                               ConsumerSettings(batch_size=settings.batch_size))

    database_ready = wiring.database_ready(pool, "case_timeline")

    consumer_ready = wiring.consumer_ready(consumer)

    reader = PgTimelineReader(DeadlinePool(pool))
    return ServiceProcess(name=NAME, app=build_app(reader, edge=edge), host=settings.host,
                          port=settings.port, workers={"consumer": consumer.run},
                          readiness={"postgres": database_ready, "consumer": consumer_ready,
                                     **dependency_checks(settings.kafka_bootstrap,
                                                         settings.registry_url)},
                          closers=[codec.close, pool.close])
