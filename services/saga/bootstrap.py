"""Wiring of the saga-orchestrator — the only place that builds adapters.

``build()`` reads :class:`SagaSettings`, applies the migrations (outbox, then
``migrations/*.sql``), loads the catalog and prepares the codec (registering schemas in
dev), builds the case-review saga from the settings and checks it against the catalog, and
returns a :class:`~casestream.service.process.ServiceProcess` with three workers:

- ``consumer``: :class:`~casestream.consumer.runtime.ConsumerRuntime` ``saga.orchestrator``
  on ``outbox.event.case``, ``outbox.event.decision``, ``outbox.event.notice``;
- ``relay``: the :class:`~casestream.outbox.relay.core.OutboxRelay` of the saga database;
- ``deadlines``: the :class:`DeadlineScheduler`.

HTTP: ``/sagas`` routes (:mod:`services.saga.adapters.http`) plus ``/healthz``/``/readyz``,
behind the shared edge (bearer tokens, load shedding, rate limits, request deadlines:
``casestream.http``); the HTTP read side and the resolve use case draw connections through
``DeadlinePool``, the workers use the plain pool.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from casestream.service import wiring
from casestream.events import Catalog
from casestream.migrations import Migration
from casestream.errors import ConfigError
from casestream.consumer import HandlerRegistry
from casestream.http import DeadlinePool
from casestream.outbox import OutboxWriter
from casestream.service import ServiceProcess
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


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return wiring.service_migrations(MIGRATIONS)


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
    settings = settings or wiring.read_settings(SagaSettings, NAME)
    base = wiring.groundwork(settings, NAME, migrations())
    catalog, codec = base.catalog, base.codec
    definition = definition_from(settings, catalog)
    orchestrator = Orchestrator(definition, clock=wiring.utc_now)

    pool = wiring.connection_pool(settings.dsn, NAME, settings.pool_size)
    outbox = OutboxWriter(codec)
    registry = handlers.register(HandlerRegistry(), orchestrator,
                                 also_known=wiring.event_types_on(catalog, handlers.TOPICS))
    consumer = wiring.consumer_runtime(handlers, registry, codec, pool, settings,
                                       batch_size=settings.consumer_batch, outbox=outbox)
    relay = wiring.outbox_relay(pool, settings, NAME)
    scheduler = DeadlineScheduler(pool, orchestrator, outbox,
                                  interval_s=settings.scheduler_interval_s,
                                  batch=settings.scheduler_batch)

    http_pool = DeadlinePool(pool)  # request paths: never wait past the request deadline

    def resolve(saga_id: str, *, reason: str, actor_id: str,
                tenant_id: str) -> SagaInstance | None:
        with http_pool.connection() as conn, conn.transaction():
            return orchestrator.resolve(PgSagaStore(conn), OutboxSink(outbox, conn), saga_id,
                                        reason=reason, actor_id=actor_id, tenant_id=tenant_id)

    stuck_grace = timedelta(seconds=settings.stuck_grace_s)
    # saga_state_total, compensation_total, timeouts_total, saga_stuck_total
    register_saga_metrics(pool, definition, stuck_grace=stuck_grace)
    return ServiceProcess(
        name=NAME, app=build_app(PgSagaQueries(http_pool), orchestrator, resolve, edge=base.edge,
                                 stuck_grace=stuck_grace, clock=wiring.utc_now),
        host=settings.host, port=settings.port,
        workers={"consumer": consumer.run, "relay": relay.run, "deadlines": scheduler},
        readiness=wiring.readiness(pool, "saga", consumer, settings),
        closers=[codec.close, pool.close],
    )
