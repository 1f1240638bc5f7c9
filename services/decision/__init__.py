"""The decision service: deterministic rules decide whether a submitted case is a violation.

It consumes ``DecisionRequested`` from the saga topic (consumer ``decision.requests``),
applies the rules of :mod:`services.decision.domain.rules`, stores one decision per case
and answers with ``ViolationDetermined`` | ``NoViolationFound`` | ``DecisionFailed``
(aggregate ``decision``, id = case id) through its outbox.

Layers: ``domain`` (pure rules) <- ``application`` (use case, ports) <- ``adapters``
(PostgreSQL, consumer handler, HTTP) <- ``bootstrap``. Run: ``python -m services.decision``.
"""

from casestream.service import ServiceSpec, TopicSpec

SERVICE = ServiceSpec(
    name="decision", module="services.decision", description="decides on submitted cases",
    settings="services.decision.settings:DecisionSettings", build="services.decision.bootstrap:build",
    consumers=('decision.requests', 'decision.statistics'), outbox=True, projections=('decision.statistics',),
    subscriptions={'decision.requests': ('outbox.event.saga',),
                   'decision.statistics': ('outbox.event.decision',)},
    # retention 90 days: decision.statistics and audit.timeline rebuild from it
    topics=(TopicSpec("outbox.event.decision", partitions=6, retention_ms=7776000000),))
