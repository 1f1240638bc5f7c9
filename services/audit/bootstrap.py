"""Wiring of the audit service — the only place that builds adapters.

Worker ``consumer``: consumer ``audit.journal`` on the four event topics, one journal
handler per catalog event type. HTTP: ``GET /audit/cases/{id}`` behind the shared edge.
The audit service emits no events: no outbox table, no relay.
"""

from __future__ import annotations

from pathlib import Path

from casestream.migrations import Migration
from casestream.service import ServiceBuilder, ServiceProcess, service_migrations
from services import schemas_dir
from services.audit import SERVICE
from services.audit.adapters import handlers
from services.audit.adapters.http import build_app
from services.audit.adapters.postgres import PgTimelineReader
from services.audit.domain.entries import KNOWN_EVENT_TYPES
from services.audit.settings import AuditSettings

MIGRATIONS = SERVICE.migrations_folder()  # ServiceSpec.migrations


def migrations() -> list[Migration | Path]:
    """This service's ``migrations/*.sql`` in name order (no outbox: it emits no events)."""
    return service_migrations(MIGRATIONS, outbox=SERVICE.outbox)


def build(settings: AuditSettings | None = None) -> ServiceProcess:
    """Build the audit service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see :class:`casestream.service.ServiceBuilder`.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=schemas_dir()).start()
    b.consumer(handlers.CONSUMER, handlers.TOPICS,
               handlers.build_registry(event_types={*KNOWN_EVENT_TYPES, *b.catalog.event_types}))
    return b.build(app=build_app(PgTimelineReader(b.request_pool), edge=b.edge), ready_table="case_timeline")
