"""The case service: opens and submits regulatory cases, and closes or returns them on the
saga's request.

Layers import in one direction: ``domain`` (pure) <- ``application`` (use cases, ports)
<- ``adapters`` (PostgreSQL, HTTP, Kafka handlers) <- ``bootstrap`` (wiring). Run it with
``python -m services.case``.
"""

from casestream.service import ServiceSpec, TopicSpec

SERVICE = ServiceSpec(
    name="case", module="services.case", description="opens cases and runs the regulator's workflow on them: assignment, evidence, review, submission, withdrawal, appeal (HTTP API)",
    settings="services.case.settings:CaseSettings", build="services.case.bootstrap:build",
    consumers=('case.saga-requests', 'case.dashboard', 'case.workload'), outbox=True,
    projections=('case.dashboard', 'case.workload'),
    subscriptions={'case.saga-requests': ('outbox.event.saga',), 'case.dashboard': ('outbox.event.case',),
                   'case.workload': ('outbox.event.case',)},
    # retention 90 days: case.dashboard, case.workload and audit.timeline rebuild from it
    topics=(TopicSpec("outbox.event.case", partitions=6, retention_ms=7776000000),))
