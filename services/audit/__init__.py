"""The audit service: an append-only journal of every event and a per-case timeline.

It consumes all four topics (consumer ``audit.journal``) and serves
``GET /audit/cases/{id}``. Layers: ``domain`` (pure rules: which case an event belongs
to, its one-line summary) <- ``application`` (record / read use cases, ports) <-
``adapters`` (projection SQL, PostgreSQL, HTTP, consumer handlers) <- ``bootstrap``.
Run it with ``python -m services.audit``.
"""

from casestream.service import ServiceSpec

SERVICE = ServiceSpec(
    name="audit", module="services.audit", description="append-only audit journal and case timeline",
    settings="services.audit.settings:AuditSettings", build="services.audit.bootstrap:build",
    consumers=('audit.journal',), outbox=False,
    projections=('audit.timeline',),  # its live tables are written by consumer audit.journal
    subscriptions={'audit.journal': ('outbox.event.case', 'outbox.event.saga', 'outbox.event.decision',
                                     'outbox.event.notice')})
