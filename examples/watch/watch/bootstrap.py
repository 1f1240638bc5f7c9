"""Wiring of the watch service — the only place that builds adapters.

``build()`` hands the start-up work to ``casestream.service.ServiceBuilder.start()``
(settings, logging, edge, the migrations of ``SERVICE.migrations``, a catalog of the suite's
schemas — the case team's events, found through discovery as the installed folder ``suite``,
never by importing the suite's package — and ours, codec, pool) and declares what the service
runs (each consumer and projection listed in ``SERVICE``: the builder refuses any other):

- worker ``triggers``: consumer ``watch.triggers``, appending ``WatchTriggered`` to the outbox;
- worker ``cases``: the projection ``watch.cases`` (live consumer ``watch.cases``);
- worker ``relay``: the outbox relay of the watch database (``CASESTREAM_WATCH_RELAY_ENABLED``);
- worker ``idempotency-purge``: deletes expired Idempotency-Key records (every 5 minutes);
- HTTP: ``GET``/``PUT /watch/cases/{id}`` + ``/healthz`` ``/readyz`` behind the shared edge.
"""

from __future__ import annotations

from casestream.http import Idempotency, idempotency_purge_worker
from casestream.service import ServiceBuilder, ServiceProcess, consumer_ready, schema_folder
from watch import SCHEMAS, SERVICE
from watch.adapters import projection, triggers
from watch.adapters.http import build_app
from watch.adapters.postgres import PgUnitOfWork
from watch.settings import WatchSettings

def build(settings: WatchSettings | None = None) -> ServiceProcess:
    """Build the watch service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see ``casestream.service.ServiceBuilder``.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=[schema_folder("suite"), SCHEMAS]).start()
    b.consumer(triggers.CONSUMER, triggers.TOPICS, triggers.registry(), emits=True,
               worker="triggers")
    b.ready("projection", consumer_ready(b.projection(projection.PROJECTION)))
    if b.settings.relay_enabled:
        b.relay()
    keys = Idempotency(clock=b.clock.now)
    b.worker("idempotency-purge", idempotency_purge_worker(keys, b.pool))
    app = build_app(PgUnitOfWork(b.request_pool), b.clock, edge=b.edge, keys=keys)
    return b.build(app=app, ready_table="watches")

