"""Wiring of the decision service — the only place that builds adapters.

Workers: consumer ``decision.requests`` on ``outbox.event.saga`` (replies through the
outbox), the ``decision.statistics`` projection, the outbox relay. HTTP:
``GET /decisions/{case_id}`` behind the shared edge, reads through ``DeadlinePool``.
"""

from __future__ import annotations

from pathlib import Path

from casestream.handlers import HandlerRegistry
from casestream.service import ServiceBuilder, ServiceProcess, service_migrations
from casestream.migrations import Migration
from services import schemas_dir
from services.decision import SERVICE
from services.decision.adapters import handlers, statistics
from services.decision.adapters.http import build_app
from services.decision.adapters.postgres import PgDecisionQueries
from services.decision.application.decide import Decider
from services.decision.settings import DecisionSettings

MIGRATIONS = SERVICE.migrations_folder()  # ServiceSpec.migrations


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return service_migrations(MIGRATIONS)


def build(settings: DecisionSettings | None = None) -> ServiceProcess:
    """Build the decision service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see :class:`casestream.service.ServiceBuilder`.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=schemas_dir()).start()
    b.consumer(handlers.CONSUMER, handlers.TOPICS,
               handlers.register(HandlerRegistry(), Decider(clock=b.clock)), emits=True)
    b.projection(statistics.PROJECTION)
    b.relay()
    return b.build(app=build_app(PgDecisionQueries(b.request_pool), edge=b.edge), ready_table="decision")
