"""The saga-orchestrator: drives each submitted case through the case-review saga.

It starts a saga per ``CaseSubmitted``, asks the decision and notification services for
their part (``DecisionRequested``, ``NoticeRequested``), asks the case service to close or
return the case, fires deadlines, and records every transition.

Layers import in one direction: ``domain`` (pure: the saga definition model, the engine
and the case-review saga declared as data) <- ``application`` (use cases, ports)
<- ``adapters`` (PostgreSQL store, consumer handlers, deadline scheduler, HTTP)
<- ``bootstrap`` (wiring). Run it with ``python -m services.saga``.

Correlation id (decision, issue 7 vs the team brief): issue 7 says "the saga id is the
correlation id of every event in that journey"; the brief says the case id (set at
CaseOpened and propagated). We keep the **case id** end-to-end: the case's events before
the saga exists (CaseOpened, CaseSubmitted) already carry it, a case can run several sagas
(a resubmitted case starts a new one) and audit groups one case's whole history by it.
The saga id is still on every saga event (aggregate id) and every reply (``saga_id``), and
each request's causation id is the event that caused it.

Every transition is an event on ``outbox.event.saga`` (requests to participants,
SagaCompleted, SagaCompensated, SagaManualReviewRequired, SagaResolved,
SagaCompensationFailed), so the audit journal sees all of them.
"""
