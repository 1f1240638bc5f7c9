"""The saga-orchestrator: drives each submitted case through the case-review saga.

It starts a saga per ``CaseSubmitted``, asks the decision and notification services for
their part (``DecisionRequested``, ``NoticeRequested``), asks the case service to close or
return the case, fires deadlines, and records every transition.

Layers import in one direction: ``domain`` (pure: the saga definition model, the engine
and the case-review saga declared as data) <- ``application`` (use cases, ports)
<- ``adapters`` (PostgreSQL store, consumer handlers, deadline scheduler, HTTP)
<- ``bootstrap`` (wiring). Run it with ``python -m services.saga``.

Correlation id: the saga id is the correlation id of every event of the journey it
drives — its requests, the participants' replies (decision, notification copy the request's),
the case service's CaseClosed / CaseReturned, and the saga's own facts. The events before the
saga exists (CaseOpened, CaseSubmitted) carry the case's correlation id (the case id); the
first request's causation id is the CaseSubmitted's event id, which links the two. Every
request's causation id is the event that caused it.

Every transition is an event on ``outbox.event.saga`` (requests to participants,
SagaCompleted, SagaCompensated, SagaManualReviewRequired, SagaResolved,
SagaCompensationFailed), so the audit journal sees all of them.
"""

from casestream.service import ServiceSpec, TopicSpec

SERVICE = ServiceSpec(
    name="saga", module="services.saga", description="orchestrates the case-review saga",
    settings="services.saga.settings:SagaSettings", build="services.saga.bootstrap:build",
    consumers=('saga.orchestrator',), outbox=True,
    subscriptions={'saga.orchestrator': ('outbox.event.case', 'outbox.event.decision', 'outbox.event.notice')},
    # retention 30 days: no projection rebuilds from it; covers catch-up and dead-letter re-drive
    topics=(TopicSpec("outbox.event.saga", partitions=6, retention_ms=2592000000),))
