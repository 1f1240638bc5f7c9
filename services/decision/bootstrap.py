"""Wiring of the decision service — the only place that builds adapters.

``build()`` reads :class:`DecisionSettings`, applies the migrations (outbox, then
``migrations/*.sql``), prepares the codec, and returns a
:class:`~casestream.service.process.ServiceProcess` with two workers: the consumer runtime
``decision.requests`` on ``outbox.event.saga`` and the outbox relay of the decision
database. HTTP: ``GET /decisions/{case_id}`` plus ``/healthz``/``/readyz``, behind the
shared edge (bearer tokens, tenant scoping, load shedding, rate limits, request deadlines:
``casestream.http``; reads through ``DeadlinePool``).
"""

from __future__ import annotations

from pathlib import Path

from casestream.service import wiring
from casestream.migrations import Migration
from casestream.consumer import HandlerRegistry
from casestream.http import DeadlinePool
from casestream.outbox import OutboxWriter
from casestream.service import ServiceProcess
from services.decision.adapters import handlers, statistics
from services.decision.adapters.http import build_app
from services.decision.adapters.postgres import PgDecisionQueries
from services.decision.application.decide import Decider
from services.decision.settings import DecisionSettings

NAME = "decision"
MIGRATIONS = Path(__file__).parent / "migrations"


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return wiring.service_migrations(MIGRATIONS)


def build(settings: DecisionSettings | None = None) -> ServiceProcess:
    """Build the decision service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: bad settings, unreachable database, schema or
            registry problems (``run_service`` prints them as one line, exit status 2).
    """
    settings = settings or wiring.read_settings(DecisionSettings, NAME)
    base = wiring.groundwork(settings, NAME, migrations())
    catalog, codec = base.catalog, base.codec

    pool = wiring.connection_pool(settings.dsn, NAME, settings.pool_size)
    registry = handlers.register(HandlerRegistry(), Decider(clock=wiring.utc_now),
                                 also_known=wiring.event_types_on(catalog, handlers.TOPICS))
    consumer = wiring.consumer_runtime(handlers, registry, codec, pool, settings,
                                       batch_size=settings.consumer_batch,
                                       outbox=OutboxWriter(codec))
    # decision statistics read model (rebuildable with `casestream replay decision.statistics`)
    with pool.connection() as conn:
        statistics.create_tables(conn, statistics.PROJECTION.live_names())
    stats_consumer = wiring.consumer_runtime(
        statistics, statistics.registry(statistics.PROJECTION.live_names(), catalog.event_types),
        codec, pool, settings, batch_size=500)
    relay = wiring.outbox_relay(pool, settings, NAME)

    return ServiceProcess(
        name=NAME, app=build_app(PgDecisionQueries(DeadlinePool(pool)), edge=base.edge),
        host=settings.host, port=settings.port,
        workers={"consumer": consumer.run, "statistics": stats_consumer.run, "relay": relay.run},
        readiness=wiring.readiness(pool, "decision", consumer, settings),
        closers=[codec.close, pool.close],
    )
