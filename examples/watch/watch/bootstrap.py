"""Wiring of the watch service — the only place that builds adapters.

``build()`` reads :class:`WatchSettings`, applies the migrations (outbox DDL, then
``migrations/*.sql``), prepares two codecs — the suite's catalog (decodes the case
service's events) and this team's (``watch.SCHEMAS``, encodes ``WatchTriggered``) — and
returns a ``casestream.service.ServiceProcess``:

- HTTP: ``GET``/``PUT /watch/cases/{id}`` + ``/healthz`` ``/readyz`` behind the shared edge;
- worker ``cases``: consumer ``watch.cases`` keeping the projection ``watch_cases``;
- worker ``triggers``: consumer ``watch.triggers`` appending ``WatchTriggered`` to the outbox;
- worker ``relay``: the outbox relay of the watch database (``CASESTREAM_WATCH_RELAY_ENABLED``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from casestream.events import ConfluentSchemaRegistry, EnvelopeCodec, load_catalog
from casestream.http import DeadlinePool
from casestream.outbox import OutboxWriter
from casestream.service import ServiceProcess, Worker, wiring
from watch import SCHEMAS
from watch.adapters import projection, triggers
from watch.adapters.http import build_app
from watch.adapters.postgres import PgUnitOfWork
from watch.settings import WatchSettings
from watch.upcasters import chain

NAME = "watch"
MIGRATIONS = Path(__file__).parent / "migrations"


class SystemClock:
    """``Clock`` port: timezone-aware UTC now."""

    def now(self) -> datetime:
        return wiring.utc_now()


def build(settings: WatchSettings | None = None) -> ServiceProcess:
    """Build the watch service process (see the module docstring).

    Raises:
        ConfigError: the database is unreachable or a setting is invalid.
        casestream.errors.SchemaError / RegistryUnavailable: a codec cannot be prepared.
    """
    settings = settings or wiring.read_settings(WatchSettings, NAME)
    base = wiring.groundwork(settings, NAME, wiring.service_migrations(MIGRATIONS))
    own = EnvelopeCodec(load_catalog(SCHEMAS), ConfluentSchemaRegistry(settings.registry_url),
                        chain())
    own.prepare(auto_register=settings.auto_register_schemas)
    pool = wiring.connection_pool(settings.dsn, NAME, max_size=8)
    case_types = wiring.event_types_on(base.catalog, projection.TOPICS)

    live = projection.PROJECTION.live_names()
    with pool.connection() as conn:
        projection.create_tables(conn, live)
    cases = wiring.consumer_runtime(projection, projection.registry(live, case_types),
                                    base.codec, pool, settings, batch_size=500)
    fired = wiring.consumer_runtime(triggers, triggers.registry(case_types), base.codec, pool,
                                    settings, outbox=OutboxWriter(own))
    workers: dict[str, Worker] = {"cases": cases.run, "triggers": fired.run}
    if settings.relay_enabled:
        workers["relay"] = wiring.outbox_relay(pool, settings, NAME).run

    readiness = wiring.readiness(pool, "watches", fired, settings)
    readiness["projection"] = wiring.consumer_ready(cases)
    app = build_app(PgUnitOfWork(DeadlinePool(pool)), SystemClock(), edge=base.edge)
    return ServiceProcess(name=NAME, app=app, host=settings.host, port=settings.port,
                          workers=workers, readiness=readiness,
                          closers=[own.close, base.codec.close, pool.close])
