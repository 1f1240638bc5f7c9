"""Wiring of the decision service — the only place that builds adapters.

``build()`` reads :class:`DecisionSettings`, applies the migrations (outbox, then
``migrations/*.sql``), prepares the codec, and returns a
:class:`~casestream.service.ServiceProcess` with two workers: the consumer runtime
``decision.requests`` on ``outbox.event.saga`` and the outbox relay of the decision
database. HTTP: ``GET /decisions/{case_id}`` plus ``/healthz``/``/readyz``, behind the
shared edge (bearer tokens, tenant scoping, load shedding, rate limits, request deadlines:
``casestream.http``; reads through ``DeadlinePool``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from casestream import wiring
from casestream.catalog import load_catalog
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
from services.decision.adapters import handlers, statistics
from services.decision.adapters.http import build_app
from services.decision.adapters.postgres import PgDecisionQueries
from services.decision.application.decide import Decider
from services.decision.settings import DecisionSettings

NAME = "decision"
MIGRATIONS = Path(__file__).parent / "migrations"


def utc_now() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)


def read_settings() -> DecisionSettings:
    """DecisionSettings from the environment.

    Raises:
        ConfigError: a variable has an invalid value (the message names it).
    """
    try:
        return DecisionSettings()
    except ValidationError as e:
        raise ConfigError(f"invalid decision settings: {e}") from e


def migrations() -> list[object]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return [OUTBOX_MIGRATION, *sorted(MIGRATIONS.glob("*.sql"))]


def build(settings: DecisionSettings | None = None) -> ServiceProcess:
    """Build the decision service process (see the module docstring).

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

    pool = ConnectionPool(dsn, min_size=2, max_size=settings.pool_size, open=True,
                          kwargs={"application_name": NAME})
    outbox = OutboxWriter(codec)
    topic_types = [t for t in catalog.event_types
                   if catalog.subject_for(t).topic in handlers.TOPICS]
    registry = handlers.register(HandlerRegistry(), Decider(clock=utc_now),
                                 also_known=topic_types)
    consumer = ConsumerRuntime(handlers.CONSUMER, handlers.TOPICS, registry, codec, pool,
                               settings.consumer_config(),
                               ConsumerSettings(batch_size=settings.consumer_batch),
                               outbox=outbox)
    # decision statistics read model (rebuildable with `casestream replay decision.statistics`)
    with pool.connection() as conn:
        statistics.create_tables(conn, statistics.PROJECTION.live_names())
    stats_consumer = ConsumerRuntime(
        statistics.CONSUMER, statistics.TOPICS,
        statistics.registry(statistics.PROJECTION.live_names(), catalog.event_types),
        codec, pool, settings.consumer_config(), ConsumerSettings(batch_size=500))
    relay = OutboxRelay(pool, producer_config(settings.kafka_bootstrap,
                                              client_id="decision.relay"),
                        name="decision.relay")

    database_ready = wiring.database_ready(pool, "decision")

    consumer_ready = wiring.consumer_ready(consumer)

    return ServiceProcess(
        name=NAME, app=build_app(PgDecisionQueries(DeadlinePool(pool)), edge=edge),
        host=settings.host,
        port=settings.port, workers={"consumer": consumer.run, "statistics": stats_consumer.run,
                                            "relay": relay.run},
        readiness={"postgres": database_ready, "consumer": consumer_ready,
                   **dependency_checks(settings.kafka_bootstrap, settings.registry_url)},
        closers=[codec.close, pool.close],
    )
