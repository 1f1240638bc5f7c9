"""The orchestrator use case: events in, saga transitions and requests out.

One :class:`Orchestrator` serves one or more :class:`SagaDefinition` s, each started by its
own start event type (``SagaDefinition.start_on``; two definitions may not share one). A team
with several sagas passes them all: ``Orchestrator([review, appeal], clock=...)``. A stored
saga names its definition (``SagaInstance.definition``), and every later step of that saga
(replies, deadlines, operator actions) is interpreted by that definition. Every method runs inside the
caller's unit of work (the consumer runtime's transaction, or the scheduler's): it reads and
writes sagas through a :class:`SagaStore` and appends the resulting events through an
:class:`EventSink`, so the saga change, its history entry, its outgoing events and the
inbox row of the triggering event commit together.

Routing of an incoming event:

- a definition's start event (``CaseSubmitted``, ``AppealSubmitted``) starts a saga of that
  definition whose id is derived from the event id (uuid5), so a redelivered start event
  finds its saga and is a no-op; a start event while the case has an active saga is
  recorded on that saga and ignored. The facts a start event offers the definition's
  ``start_record`` are its payload plus ``aggregate_id`` and ``previous_saga_id`` (the id
  of the case's newest earlier saga, or None): a follow-up saga (an appeal) records which
  saga it follows;
- a reply carrying ``saga_id`` in its payload is routed to that saga; any other trigger (the
  case's ``CaseClosed`` / ``CaseReturned``) to the newest saga of the case (aggregate id);
- a reply already in the saga's history is a duplicate: nothing happens (not even a
  record); a reply the saga's state does not whitelist is recorded as IGNORED (late after a
  deadline, after completion, or out of place) and never drives a step — or as LATE when it
  is a decision after compensation began (the compensation undoes it) or a compensation
  confirmed after the saga gave up; a reply for an unknown saga is logged and dropped —
  nothing is dead-lettered merely for being late.

Alerts: entering an alerting state (``State.alert``: COMPENSATION_FAILED) is logged at
ERROR (``ALERT saga ...``) and counted (``alerts_total{state}``, :mod:`.metrics`).

Emitted events: aggregate ``saga``, id = saga id, consecutive aggregate versions, source
``saga``, correlation id = the saga id (the correlation id of every event in that journey;
participants copy it onto their replies and the case service onto CaseClosed /
CaseReturned), causation id = the triggering event (for the first request the
CaseSubmitted that started the saga, which itself still carries the case's own correlation
id; for deadline-driven requests: the event that last moved the saga).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from casestream.events import Envelope, new_event
from services.saga.application.metrics import SagaMetrics
from services.saga.application.ports import EventSink, SagaStore
from services.saga.domain.definition import SagaDefinition, StateKind
from services.saga.domain.errors import DefinitionError
from services.saga.domain.engine import (
    Disposition,
    HistoryEntry,
    Outcome,
    SagaInstance,
    apply_event,
    fire_deadline,
    reissue,
    resolve,
    start_saga,
)

log = logging.getLogger(__name__)

SAGA_NAMESPACE = uuid.UUID("6b0f6c1e-4b53-4f5e-9a3c-5a6761636173")
"""uuid5 namespace: saga id = uuid5(SAGA_NAMESPACE, start event id)."""

AGGREGATE_TYPE = "saga"
SOURCE = "saga"
ACTOR = "saga-orchestrator"


def saga_id_for(start_event_id: str) -> str:
    """The saga id started by event ``start_event_id`` (deterministic: uuid5)."""
    return str(uuid.uuid5(SAGA_NAMESPACE, start_event_id))


@dataclass(frozen=True, slots=True, kw_only=True)
class Handled:
    """What :meth:`Orchestrator.handle` did (for logs and tests).

    Attributes:
        saga_id: the saga concerned, or None if no saga was found.
        disposition: the engine's disposition, or None for a duplicate / unknown saga.
        note: one sentence.
    """

    saga_id: str | None
    disposition: Disposition | None
    note: str = ""


class Orchestrator:
    """Runs one or more saga definitions against a store and an event sink.

    Args:
        definitions: a validated saga definition, or several with distinct names and
            distinct start event types; the first is :attr:`definition` (the primary one).
        clock: returns the current time (timezone-aware UTC).
        metrics: counters to increment (see :mod:`.metrics`); a fresh set if None.

    Raises:
        DefinitionError: no definition, two with one name, or two started by one event type.
    """

    def __init__(self, definitions: SagaDefinition | Sequence[SagaDefinition], *,
                 clock: Callable[[], datetime], metrics: SagaMetrics | None = None):
        listed = (definitions,) if isinstance(definitions, SagaDefinition) else tuple(definitions)
        if not listed:
            raise DefinitionError("orchestrator", ["it needs at least one saga definition"])
        self.definitions: dict[str, SagaDefinition] = {}
        self._starters: dict[str, SagaDefinition] = {}
        for d in listed:
            if d.name in self.definitions:
                raise DefinitionError(d.name, [f"two saga definitions are named {d.name!r}"])
            if d.start_on in self._starters:
                raise DefinitionError(d.name, [
                    f"saga definitions {self._starters[d.start_on].name!r} and {d.name!r} are "
                    f"both started by {d.start_on}; each needs its own start event type"])
            self.definitions[d.name] = d
            self._starters[d.start_on] = d
        self.definition = listed[0]
        self.clock = clock
        self.metrics = metrics if metrics is not None else SagaMetrics()

    def definition_of(self, saga: SagaInstance) -> SagaDefinition:
        """The definition that interprets ``saga``.

        Raises:
            DefinitionError: the saga names a definition this orchestrator does not run
                (a deployment that dropped a definition while its sagas still run).
        """
        try:
            return self.definitions[saga.definition]
        except KeyError:
            raise DefinitionError(saga.definition, [
                f"saga {saga.saga_id} is of definition {saga.definition!r}, which this "
                f"orchestrator does not run (it runs {sorted(self.definitions)})"]) from None

    # -- events ----------------------------------------------------------------------
    def handles(self) -> frozenset[str]:
        """Event types this orchestrator consumes (every definition's start event and reply
        triggers)."""
        out: set[str] = set(self._starters)
        for d in self.definitions.values():
            out |= d.triggers()
        return frozenset(out)

    def handle(self, store: SagaStore, sink: EventSink, event: Envelope) -> Handled:
        """Apply ``event`` (see the module docstring for routing).

        Raises:
            casestream.errors.ConcurrencyError: the saga changed under us (retry the unit).
            KeyError: the event lacks a field the definition records (contract breach).
        """
        starter = self._starters.get(event.event_type)
        if starter is not None:
            return self._start(starter, store, sink, event)
        saga = self._route(store, event)
        if saga is None:
            log.warning("no saga for %s %s (aggregate %s); dropped", event.event_type,
                        event.event_id, event.aggregate_id)
            return Handled(saga_id=None, disposition=None, note="no saga found")
        case_id = event.payload.get("case_id")
        if case_id is not None and case_id != saga.case_id:
            log.warning("%s %s names case %s but saga %s is of case %s; dropped",
                        event.event_type, event.event_id, case_id, saga.saga_id, saga.case_id)
            return Handled(saga_id=saga.saga_id, disposition=None, note="case mismatch")
        if store.seen(saga.saga_id, event.event_id):
            return Handled(saga_id=saga.saga_id, disposition=None, note="duplicate")
        outcome = apply_event(self.definition_of(saga), saga, event_type=event.event_type,
                              payload=event.payload, event_id=event.event_id, now=self.clock())
        self._save(store, sink, saga, outcome, cause=event)
        return Handled(saga_id=saga.saga_id, disposition=outcome.history.disposition,
                       note=outcome.history.note)

    def _start(self, definition: SagaDefinition, store: SagaStore, sink: EventSink,
               event: Envelope) -> Handled:
        case_id = event.aggregate_id
        saga_id = saga_id_for(event.event_id)
        if store.get(saga_id) is not None:
            return Handled(saga_id=saga_id, disposition=None, note="duplicate start")
        active = store.active_for_case(case_id)
        if active is not None:
            note = f"{event.event_type} while saga {active.saga_id} is active; ignored"
            if not store.seen(active.saga_id, event.event_id):
                store.record(active.saga_id, HistoryEntry(
                    at=self.clock(), trigger=event.event_type, event_id=event.event_id,
                    from_state=active.state, to_state=active.state,
                    disposition=Disposition.IGNORED, note=note))
            return Handled(saga_id=active.saga_id, disposition=Disposition.IGNORED, note=note)
        previous = store.newest_for_case(case_id)
        facts: dict[str, Any] = {**event.payload, "aggregate_id": case_id,
                                 "previous_saga_id": None if previous is None else previous.saga_id}
        outcome = start_saga(definition, saga_id=saga_id, case_id=case_id,
                             tenant_id=event.tenant_id, correlation_id=saga_id,
                             facts=facts, event_id=event.event_id, now=self.clock())
        saga = replace(outcome.saga, version=1)
        if not store.insert(saga, started_by=event.event_id, active=self._active(saga)):
            return Handled(saga_id=saga_id, disposition=None, note="duplicate start")
        store.record(saga_id, outcome.history)
        sink.append(self._envelopes(saga, outcome, cause=event))
        self.metrics.inc("transitions_total", saga.state)
        return Handled(saga_id=saga_id, disposition=Disposition.STARTED)

    def _route(self, store: SagaStore, event: Envelope) -> SagaInstance | None:
        saga_id = event.payload.get("saga_id")
        if saga_id:
            return store.get(str(saga_id))
        return store.newest_for_case(event.aggregate_id)

    # -- deadlines -------------------------------------------------------------------
    def fire_due(self, store: SagaStore, sink: EventSink, *, limit: int = 100) -> int:
        """Fire every due deadline among up to ``limit`` claimed sagas; return how many fired.

        Raises:
            casestream.errors.ConcurrencyError: cannot happen for claimed (locked) rows
                unless the store is misused; propagated.
        """
        now = self.clock()
        fired = 0
        for saga in store.claim_due(now, limit):
            outcome = fire_deadline(self.definition_of(saga), saga, now=now)
            if outcome.changed:
                self._save(store, sink, saga, outcome, cause=None)
                fired += 1
        return fired

    # -- operator --------------------------------------------------------------------
    def resolve(self, store: SagaStore, sink: EventSink, saga_id: str, *,
                reason: str, actor_id: str, tenant_id: str | None = None) -> SagaInstance | None:
        """Resolve a PARKED saga with the operator's ``reason``; None if no such saga.

        With ``tenant_id``, a saga of another tenant is treated as unknown (None) before
        its state is looked at, so a caller learns nothing about it.

        Raises:
            UnknownTrigger: the saga is not in a state that can be resolved.
            casestream.errors.ConcurrencyError: the saga changed concurrently.
        """
        saga = store.get(saga_id)
        if saga is None or (tenant_id is not None and saga.tenant_id != tenant_id):
            return None
        outcome = resolve(self.definition_of(saga), saga, input={"reason": reason}, now=self.clock())
        return self._save(store, sink, saga, outcome, cause=None, actor_id=actor_id)

    def reissue(self, store: SagaStore, sink: EventSink, saga_id: str, *, step: str,
                note: str, actor_id: str = ACTOR) -> SagaInstance | None:
        """Re-issue ``step``'s request of saga ``saga_id`` (reconciliation repair); None if
        no such saga. The state does not change; the history records ``note``.

        Raises:
            KeyError: unknown step or missing data.
            casestream.errors.ConcurrencyError: the saga changed concurrently.
        """
        saga = store.get(saga_id)
        if saga is None:
            return None
        outcome = reissue(self.definition_of(saga), saga, step=step, now=self.clock(), note=note)
        return self._save(store, sink, saga, outcome, cause=None, actor_id=actor_id)

    # -- persistence -----------------------------------------------------------------
    def _active(self, saga: SagaInstance) -> bool:
        return self.definition_of(saga).state(saga.state).kind is not StateKind.TERMINAL

    def _save(self, store: SagaStore, sink: EventSink, before: SagaInstance, outcome: Outcome,
              *, cause: Envelope | None, actor_id: str = ACTOR) -> SagaInstance:
        saga = outcome.saga
        if outcome.changed:
            saga = replace(saga, version=before.version + 1)
            store.update(saga, expected_version=before.version, active=self._active(saga))
            sink.append(self._envelopes(saga, outcome, cause=cause, actor_id=actor_id))
        store.record(saga.saga_id, outcome.history)
        self._observe(before, saga, outcome)
        return saga

    def _observe(self, before: SagaInstance, saga: SagaInstance, outcome: Outcome) -> None:
        """Counters, and the alert (log at ERROR) on entering an alerting state."""
        disposition = outcome.history.disposition
        if disposition is Disposition.LATE:
            self.metrics.inc("late_replies_total", outcome.history.trigger)
            log.warning("saga %s (case %s): %s", saga.saga_id, saga.case_id,
                        outcome.history.note)
        elif disposition is Disposition.IGNORED:
            self.metrics.inc("ignored_replies_total")
        elif disposition is Disposition.TRANSITIONED and before.state != saga.state:
            self.metrics.inc("transitions_total", saga.state)
            if self.definition_of(saga).state(saga.state).alert:
                self.metrics.inc("alerts_total", saga.state)
                log.error("ALERT saga %s (case %s, tenant %s) entered %s: %s; operator action "
                          "needed", saga.saga_id, saga.case_id, saga.tenant_id, saga.state,
                          outcome.history.note or saga.data.get("failure", ""))

    def _envelopes(self, saga: SagaInstance, outcome: Outcome, *, cause: Envelope | None,
                   actor_id: str = ACTOR) -> list[Envelope]:
        now = outcome.history.at
        causation = cause.event_id if cause is not None else saga.last_event_id
        traceparent = cause.traceparent if cause is not None else None
        return [
            new_event(event_type=e.event_type, aggregate_type=AGGREGATE_TYPE,
                      aggregate_id=saga.saga_id, aggregate_version=e.aggregate_version,
                      payload=_plain(e.payload), tenant_id=saga.tenant_id, source=SOURCE,
                      actor_id=actor_id, correlation_id=saga.correlation_id,
                      causation_id=causation, traceparent=traceparent, occurred_at=now)
            for e in outcome.emissions
        ]


def _plain(payload: Mapping[str, Any]) -> dict[str, Any]:
    return dict(payload)
