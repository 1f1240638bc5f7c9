"""Wiring of the saga-orchestrator — the only place that builds adapters.

``build()`` builds the case-review, appeal and notice-correction sagas from the settings,
checks them against the catalog,
and returns a :class:`~casestream.service.process.ServiceProcess` with three workers:

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

from casestream.handlers import HandlerRegistry
from casestream.errors import ConfigError
from casestream.events import Catalog
from casestream.migrations import Migration
from casestream.outbox import OutboxSink
from casestream.service import ServiceBuilder, ServiceProcess, service_migrations
from services import schemas_dir
from services.saga import SERVICE
from services.saga.adapters import handlers
from services.saga.adapters.http import build_app
from services.saga.adapters.metrics_pg import register_saga_metrics
from services.saga.adapters.postgres import PgSagaQueries, PgSagaStore
from services.saga.adapters.scheduler import DeadlineScheduler
from services.saga.application.contract import check_against_catalog, payload_fields
from services.saga.application.orchestrator import Orchestrator
from services.saga.domain.appeal import appeal_saga
from services.saga.domain.case_review import case_review_saga
from services.saga.domain.correction import notice_correction_saga
from services.saga.domain.definition import SagaDefinition
from services.saga.domain.errors import DefinitionError
from services.saga.domain.engine import SagaInstance
from services.saga.settings import SagaSettings

NAME = SERVICE.name
MIGRATIONS = SERVICE.migrations_folder()  # ServiceSpec.migrations


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return service_migrations(MIGRATIONS)


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


def definitions_from(settings: SagaSettings, catalog: Catalog) -> tuple[SagaDefinition, ...]:
    """The sagas this service runs — case review (started by ``CaseSubmitted``) first, then
    the appeal (``AppealSubmitted``) and the notice correction (``NoticeCorrectionOrdered``)
    — with the configured deadlines, checked against ``catalog``. The appeal and correction
    sagas' decision and notice steps use the case-review deadlines.

    Raises:
        ConfigError: a definition is inconsistent or does not match the catalog.
    """
    try:
        appeal = appeal_saga(decision_deadline=timedelta(seconds=settings.decision_deadline_s),
                             notice_deadline=timedelta(seconds=settings.notice_deadline_s),
                             close_deadline=timedelta(seconds=settings.close_deadline_s),
                             close_attempts=settings.close_attempts)
        correction = notice_correction_saga(
            notice_deadline=timedelta(seconds=settings.notice_deadline_s))
    except DefinitionError as e:
        raise ConfigError(str(e)) from e
    check_against_catalog(appeal, catalog)
    check_against_catalog(correction, catalog)
    return definition_from(settings, catalog), appeal, correction


def build(settings: SagaSettings | None = None) -> ServiceProcess:
    """Build the saga-orchestrator process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see :class:`casestream.service.ServiceBuilder`;
            ConfigError for a saga definition that does not match the catalog.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=schemas_dir()).start()
    s, outbox = b.settings, b.outbox
    definitions = definitions_from(s, b.catalog)
    orchestrator = Orchestrator(definitions, clock=b.clock)
    b.consumer(handlers.CONSUMER, handlers.TOPICS, handlers.register(HandlerRegistry(), orchestrator),
               emits=True)
    b.relay()
    b.worker("deadlines", DeadlineScheduler(b.pool, orchestrator, outbox, interval_s=s.scheduler_interval_s,
                                            batch=s.scheduler_batch))

    def resolve(saga_id: str, *, reason: str, actor_id: str, tenant_id: str) -> SagaInstance | None:
        with b.request_pool.connection() as conn, conn.transaction():
            return orchestrator.resolve(PgSagaStore(conn), OutboxSink(outbox, conn), saga_id,
                                        reason=reason, actor_id=actor_id, tenant_id=tenant_id)

    stuck_grace = timedelta(seconds=s.stuck_grace_s)
    # saga_state_total, compensation_total, timeouts_total, saga_stuck_total
    register_saga_metrics(b.pool, definitions, stuck_grace=stuck_grace)
    return b.build(app=build_app(PgSagaQueries(b.request_pool), orchestrator, resolve, edge=b.edge,
                                 stuck_grace=stuck_grace, clock=b.clock), ready_table="saga")
