"""The saga-orchestrator: drives each submitted case through the case-review saga.

It starts a saga per ``CaseSubmitted``, asks the decision and notification services for
their part (``DecisionRequested``, ``NoticeRequested``), asks the case service to close or
return the case, fires deadlines, and records every transition.

Layers import in one direction: ``domain`` (pure: the saga definition model, the engine
and the case-review saga declared as data) <- ``application`` (use cases, ports)
<- ``adapters`` (PostgreSQL store, consumer handlers, deadline scheduler, HTTP)
<- ``bootstrap`` (wiring). Run it with ``python -m services.saga``.
"""
