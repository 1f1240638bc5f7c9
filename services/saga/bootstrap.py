"""Wiring of the saga-orchestrator — the only place that builds adapters.

``build()`` reads :class:`SagaSettings`, applies the migrations (outbox, then
``migrations/*.sql``), loads the catalog and prepares the codec (registering schemas in
dev), builds the case-review saga from the settings and checks it against the catalog, and
returns a :class:`~casestream.service.ServiceProcess` with three workers:

- ``consumer``: :class:`~casestream.consumer.runtime.ConsumerRuntime` ``saga.orchestrator``
  on ``outbox.event.case``, ``outbox.event.decision``, ``outbox.event.notice``;
- ``relay``: the :class:`~casestream.relay.core.OutboxRelay` of the saga database;
- ``deadlines``: the :class:`DeadlineScheduler`.

HTTP: ``/sagas`` routes (:mod:`services.saga.adapters.http`) plus ``/healthz``/``/readyz``,
behind the shared edge (bearer tokens, load shedding, rate limits, request deadlines:
``casestream.http``); the HTTP read side and the resolve use case draw connections through
``DeadlinePool``, the workers use the plain pool.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from casestream import wiring
from casestream.catalog import Catalog, load_catalog
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers import HandlerRegistry
from casestream.http.edge import edge_policy
from casestream.http.pgdeadline import DeadlinePool
from casestream.kafka_config import producer_config
from casestream.outbox import OUTBOX_MIGRATION, OutboxWriter
from casestream.relay.core import OutboxRelay
from casestream.service import ServiceProcess, configure_logging
from casestream.telemetry.readiness import dependency_checks
from services.saga.adapters import handlers
from services.saga.adapters.handlers import OutboxSink
from services.saga.adapters.http import build_app
from services.saga.adapters.metrics_pg import register_saga_metrics
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.adapters.scheduler import DeadlineScheduler
from services.saga.application.contract import check_against_catalog, payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.domain.case_review import case_review_saga
from services.saga.domain.definition import SagaDefinition
from services.saga.domain.errors import DefinitionError
from services.saga.domain.engine import SagaInstance
from services.saga.settings import SagaSettings

NAME = "saga"
MIGRATIONS = Path(__file__).parent / "migrations"


def utc_now() -> datetime:
    """The orchestrator's clock: timezone-aware UTC now."""
    return datetime.now(UTC)


def read_settings() -> SagaSettings:
    """SagaSettings from the environment.

    Raises:
        ConfigError: a variable has an invalid value (the message names it).
    """
    try:
        return SagaSettings()
    except ValidationError as e:
        raise ConfigError(f"invalid saga settings: {e}") from e


def migrations() -> list[object]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return [OUTBOX_MIGRATION, *sorted(MIGRATIONS.glob("*.sql"))]


def definition_from(settings: SagaSettings, catalog: Catalog) -> SagaDefinition:
    """The case-review saga with the configured deadlines, checked against ``catalog``.

    Raises:
        ConfigError: the definition is inconsistent or does not match the catalog.
    """
    try:
        definition = case_review_saga(
            decision_deadline=timedelta(seconds=settings.decision_deadline_s),
            notice_deadline=timedelta(seconds=settings.notice_deadline_s),
            close_deadline=timedelta(seconds=settings.close_deadline_s),
            close_attempts=settings.close_attempts,
            return_deadline=timedelta(seconds=settings.return_deadline_s),
            return_attempts=settings.return_attempts,
            decision_request_fields=payload_fields(catalog, "DecisionRequested"),
        )
    except DefinitionError as e:
        raise ConfigError(str(e)) from e
    check_against_catalog(definition, catalog)
    return definition


def build(settings: SagaSettings | None = None) -> ServiceProcess:
    """Build the saga-orchestrator process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: bad settings, unreachable database, schema or
            registry problems (``run_service`` prints them as one line, exit status 2).
    """
    settings = settings or read_settings()
    configure_logging(NAME, settings.log_level)
    edge = edge_policy(settings, NAME)
    dsn = settings.database_url(settings.database)
    wiring.migrate(dsn, migrations(), service=NAME)
    catalog = load_catalog()
    codec = wiring.prepared_codec(settings, catalog)
    definition = definition_from(settings, catalog)
    orchestrator = Orchestrator(definition, clock=utc_now)

    pool = ConnectionPool(dsn, min_size=2, max_size=settings.pool_size, open=True,
                          kwargs={"application_name": NAME})
    outbox = OutboxWriter(codec)
    topic_types = [t for t in catalog.event_types
                   if catalog.subject_for(t).topic in handlers.TOPICS]
    registry = handlers.register(HandlerRegistry(), orchestrator, also_known=topic_types)
    consumer = ConsumerRuntime(handlers.CONSUMER, handlers.TOPICS, registry, codec, pool,
                               settings.consumer_config(),
                               ConsumerSettings(batch_size=settings.consumer_batch),
                               outbox=outbox)
    relay = OutboxRelay(pool, producer_config(settings.kafka_bootstrap, client_id="saga.relay"),
                        name="saga.relay")
    scheduler = DeadlineScheduler(pool, orchestrator, outbox,
                                  interval_s=settings.scheduler_interval_s,
                                  batch=settings.scheduler_batch)

    http_pool = DeadlinePool(pool)  # request paths: never wait past the request deadline

    def resolve(saga_id: str, *, reason: str, actor_id: str,
                tenant_id: str) -> SagaInstance | None:
        with http_pool.connection() as conn, conn.transaction():
            return orchestrator.resolve(PgSagaStore(conn), OutboxSink(outbox, conn), saga_id,
                                        reason=reason, actor_id=actor_id, tenant_id=tenant_id)

    database_ready = wiring.database_ready(pool, "saga")

    consumer_ready = wiring.consumer_ready(consumer)

    # saga_state_total, compensation_total, timeouts_total, saga_stuck_total
    register_saga_metrics(pool, definition,
                          stuck_grace=timedelta(seconds=settings.stuck_grace_s))
    return ServiceProcess(
        name=NAME, app=build_app(PgSagaQueries(http_pool), orchestrator, resolve, edge=edge,
                                 stuck_grace=timedelta(seconds=settings.stuck_grace_s),
                                 clock=utc_now),
        host=settings.host, port=settings.port,
        workers={"consumer": consumer.run, "relay": relay.run, "deadlines": scheduler},
        readiness={"postgres": database_ready, "consumer": consumer_ready,
                   **dependency_checks(settings.kafka_bootstrap, settings.registry_url)},
        closers=[codec.close, pool.close],
    )
