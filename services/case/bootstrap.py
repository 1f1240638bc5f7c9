"""Wiring of the case service — the only place that builds adapters.

``build()`` returns a :class:`~casestream.service.process.ServiceProcess`:

- HTTP: the case API (``services.case.adapters.http.app``) + ``/healthz`` ``/readyz``,
  behind the shared edge (bearer tokens, load shedding, rate limits, request deadlines:
  ``casestream.http``); HTTP use cases draw connections through ``DeadlinePool``;
- worker ``consumer``: consumer ``case.saga-requests`` on ``outbox.event.saga``, worker
  ``dashboard``: the ``case.dashboard`` projection, and worker ``workload``: the
  ``case.workload`` projection (all off with CONSUMER_ENABLED=false);
- worker ``relay``: the outbox relay of the case database (off when Debezium publishes);
- worker ``idempotency-purge``: deletes expired idempotency records periodically;
- worker ``evidence-deadlines``: every DEADLINE_INTERVAL_S, reminds cases whose evidence is
  overdue (EvidenceOverdue) and escalates them to manual review EVIDENCE_GRACE_S later.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta
from pathlib import Path

from casestream.handlers import HandlerRegistry
from casestream.events import Catalog
from casestream.migrations import Migration
from casestream.service import ServiceBuilder, ServiceProcess, Worker, service_migrations
from services import schemas_dir
from services.case import SERVICE
from services.case.adapters import dashboard, saga_requests, workload
from services.case.adapters.http.app import build_app
from services.case.adapters.postgres import PgUnitOfWork
from services.case.application.service import CaseService
from services.case.settings import CaseSettings

MIGRATIONS = SERVICE.migrations_folder()  # ServiceSpec.migrations

log = logging.getLogger(__name__)


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return service_migrations(MIGRATIONS)


def consumer_registry(service: CaseService, catalog: Catalog) -> HandlerRegistry:
    """Handlers of ``case.saga-requests``; every other event type of its topics is ignored."""
    registry = saga_requests.build_registry(service)
    others = [t for t in catalog.event_types
              if catalog.subject_for(t).topic in saga_requests.TOPICS and not registry.knows(t)]
    registry.ignore(*others)
    return registry


def purge_worker(service: CaseService, interval_s: float) -> Worker:
    """A worker deleting expired idempotency records every ``interval_s`` seconds."""

    def run(stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            try:
                while service.purge_idempotency_records(limit=1000) == 1000 and not stop.is_set():
                    pass
            except Exception:  # noqa: BLE001 - a failed purge is retried next period
                log.warning("idempotency purge failed; retrying in %.0f s", interval_s,
                            exc_info=True)

    return run


def deadline_worker(service: CaseService, grace_s: float, interval_s: float) -> Worker:
    """A worker running the evidence deadlines every ``interval_s`` seconds."""

    def run(stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            try:
                while service.run_evidence_deadlines(timedelta(seconds=grace_s)) == 100 \
                        and not stop.is_set():
                    pass
            except Exception:  # noqa: BLE001 - a failed scan is retried next period
                log.warning("evidence deadline scan failed; retrying in %.0f s", interval_s,
                            exc_info=True)

    return run


def build(settings: CaseSettings | None = None) -> ServiceProcess:
    """Build the case service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see :class:`casestream.service.ServiceBuilder`.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=schemas_dir()).start()
    s = b.settings
    service = CaseService(uow=PgUnitOfWork.factory(b.request_pool, b.outbox.append), clock=b.clock,
                          new_id=lambda: str(uuid.uuid4()),
                          idempotency_ttl=timedelta(seconds=s.idempotency_ttl_s))
    b.worker("idempotency-purge", purge_worker(service, s.purge_interval_s))
    b.worker("evidence-deadlines", deadline_worker(service, s.evidence_grace_s,
                                                   s.deadline_interval_s))
    if s.consumer_enabled:
        b.consumer(saga_requests.CONSUMER, saga_requests.TOPICS, saga_requests.build_registry(service),
                   emits=True)
        b.projection(dashboard.PROJECTION, worker="dashboard")  # `casestream replay case.dashboard`
        b.projection(workload.PROJECTION, worker="workload")  # `casestream replay case.workload`
    if s.relay_enabled:
        b.relay()
    return b.build(app=build_app(service, edge=b.edge), ready_table="cases")
