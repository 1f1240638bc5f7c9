"""The saga engine: one interpreter for every :class:`SagaDefinition` (pure, no I/O).

Three entry points, each returning an :class:`Outcome` (the new instance, the events to
emit, and a history entry) and never mutating anything:

- :func:`start_saga` — a new instance in the definition's initial state; the initial
  step's action is issued.
- :func:`apply_event` — a reply (or an operator :data:`RESOLVE`): if the definition
  whitelists ``(state, event_type)`` the transition is taken, otherwise the event is
  *ignored* and only recorded (a late reply after a deadline fired or after completion, a
  duplicate, or a reply meant for another step never drives a step); a compensable step's
  success arriving after compensation began is recorded as *late* (the compensation already
  issued undoes its effect — e.g. a decision made after the case was sent back).
- :func:`fire_deadline` — the current step's deadline passed: the action is re-issued
  while its :class:`RetryPolicy` allows (disposition RETRIED), then the state's
  :data:`DEADLINE` transition is taken.

Entering a state issues its step's action (attempt 1, deadline set) and its announcements;
entering a non-active state clears step, attempts and deadline. Emitted events are numbered
with consecutive aggregate versions of the saga (``event_seq``). Times are timezone-aware
``datetime`` values supplied by the caller (the engine has no clock).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from services.saga.domain.definition import (
    DEADLINE,
    RESOLVE,
    FieldMap,
    Request,
    SagaDefinition,
    StateKind,
)
from services.saga.domain.errors import UnknownTrigger


class Disposition(enum.Enum):
    """What a trigger did to a saga."""

    STARTED = "started"  # the saga was created
    TRANSITIONED = "transitioned"  # a whitelisted transition was taken
    RETRIED = "retried"  # a deadline passed and the step's action was issued again
    IGNORED = "ignored"  # not whitelisted in the current state: recorded, nothing else
    LATE = "late"  # a compensable step's success after compensation began (its effect is
    #               undone by the compensation already issued), or a compensation confirmed
    #               after the saga gave up (COMPENSATION_FAILED): recorded only


@dataclass(frozen=True, slots=True, kw_only=True)
class SagaInstance:
    """One running (or finished) saga.

    Attributes:
        saga_id: uuid string; also the aggregate id of every event the saga emits.
        definition: name of its :class:`SagaDefinition`.
        case_id, tenant_id, correlation_id: the journey it belongs to.
        state: current state name.
        step: the step awaited in ``state`` (None when not ACTIVE).
        attempts: how often ``step``'s action has been issued (0 when no step).
        deadline_at: when the current attempt times out (None when no deadline).
        data: the saga's facts (JSON-compatible values), read by request payloads.
        version: row version for optimistic concurrency (0 = not stored yet).
        event_seq: aggregate version of the last event this saga emitted (0 = none).
        last_event_id: id of the last event that changed the saga (causation of
            deadline-driven requests).
    """

    saga_id: str
    definition: str
    case_id: str
    tenant_id: str
    correlation_id: str
    state: str
    step: str | None = None
    attempts: int = 0
    deadline_at: datetime | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    version: int = 0
    event_seq: int = 0
    last_event_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Emission:
    """An event the saga emits (aggregate ``saga``, id = saga id).

    Attributes:
        event_type: e.g. ``"DecisionRequested"``.
        payload: its payload (JSON-compatible values).
        aggregate_version: consecutive per saga, starting at 1.
    """

    event_type: str
    payload: Mapping[str, Any]
    aggregate_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    """What one trigger did, for the saga's history (``GET /sagas/{id}``).

    Attributes:
        at: when it was applied.
        trigger: event type, :data:`DEADLINE`, :data:`RESOLVE` or the start event type.
        event_id: id of the triggering event (None for deadlines and operator actions).
        from_state, to_state: before and after (equal when ignored or retried).
        disposition: see :class:`Disposition`.
        note: one human sentence (why ignored, which attempt, the operator's reason).
    """

    at: datetime
    trigger: str
    event_id: str | None
    from_state: str | None
    to_state: str
    disposition: Disposition
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """Result of one engine call.

    Attributes:
        saga: the instance after the trigger (the same object when ignored).
        emissions: events to append to the orchestrator's outbox, in order.
        history: the entry to record.
    """

    saga: SagaInstance
    emissions: tuple[Emission, ...]
    history: HistoryEntry

    @property
    def changed(self) -> bool:
        """True unless the trigger was ignored or recorded as late."""
        return self.history.disposition not in (Disposition.IGNORED, Disposition.LATE)


def _pick(fmap: FieldMap, source: Mapping[str, Any], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for target, src in fmap:
        if src not in source:
            raise KeyError(f"{what}: field {src!r} missing")
        out[target] = source[src]
    return out


def _emit(req: Request, data: Mapping[str, Any], seq: int) -> Emission:
    return Emission(event_type=req.event_type,
                    payload=_pick(req.payload, data, f"{req.event_type} payload"),
                    aggregate_version=seq)


def _enter(d: SagaDefinition, saga: SagaInstance, target: str, data: Mapping[str, Any],
           now: datetime, *, event_id: str | None,
           announce: tuple[Request, ...] = ()) -> tuple[SagaInstance, tuple[Emission, ...]]:
    """Enter ``target``: emit the transition's ``announce``, then issue the state's step's
    action (attempt 1) and its announcements."""
    state = d.state(target)
    seq = saga.event_seq
    emissions: list[Emission] = []
    for req in announce:
        seq += 1
        emissions.append(_emit(req, data, seq))
    step_name, attempts, deadline_at = None, 0, None
    if state.kind is StateKind.ACTIVE and state.step is not None:
        step = d.step(state.step)
        seq += 1
        emissions.append(_emit(step.action, data, seq))
        step_name, attempts = step.name, 1
        if step.deadline is not None:
            deadline_at = now + step.retry.deadline_for(step.deadline, 1)
    for req in state.emits:
        seq += 1
        emissions.append(_emit(req, data, seq))
    new = replace(saga, state=target, step=step_name, attempts=attempts, deadline_at=deadline_at,
                  data=data, event_seq=seq,
                  last_event_id=event_id if event_id is not None else saga.last_event_id)
    return new, tuple(emissions)


def start_saga(d: SagaDefinition, *, saga_id: str, case_id: str, tenant_id: str,
               correlation_id: str, facts: Mapping[str, Any], event_id: str,
               now: datetime) -> Outcome:
    """Start a saga of definition ``d`` from its start event.

    Args:
        facts: the start event's payload plus ``aggregate_id``; ``d.start_record`` picks
            the saga data from it.
        event_id: id of the start event (causation of the first request).

    Raises:
        KeyError: a field named in ``d.start_record`` is missing from ``facts``.
    """
    data = _pick(d.start_record, facts, f"{d.start_on} facts")
    blank = SagaInstance(saga_id=saga_id, definition=d.name, case_id=case_id,
                         tenant_id=tenant_id, correlation_id=correlation_id, state=d.initial,
                         data=data, last_event_id=event_id)
    saga, emissions = _enter(d, blank, d.initial, data, now, event_id=event_id)
    entry = HistoryEntry(at=now, trigger=d.start_on, event_id=event_id, from_state=None,
                         to_state=d.initial, disposition=Disposition.STARTED)
    return Outcome(saga=saga, emissions=emissions, history=entry)


def apply_event(d: SagaDefinition, saga: SagaInstance, *, event_type: str,
                payload: Mapping[str, Any], event_id: str | None, now: datetime) -> Outcome:
    """Apply a reply event (or :data:`RESOLVE` with the operator's input as ``payload``).

    Not whitelisted in the current state -> IGNORED (the saga is returned unchanged).

    Raises:
        KeyError: the transition records a field the payload lacks (a contract breach).
    """
    t = d.transition(saga.state, event_type)
    late = t is None and saga.state in d.compensation_states()
    if (late and event_type in d.compensation_confirmations()
            and saga.state in d.compensation_abandoned_states()):
        note = (f"late {event_type}: the compensation was confirmed after the saga gave up "
                f"(state {saga.state}); recorded for the operator")
    elif late and event_type in d.success_triggers():
        note = (f"late {event_type} after compensation began (state {saga.state}): recorded; "
                "its effect is undone by the compensation already issued")
    else:
        late = False
    if late:
        entry = HistoryEntry(at=now, trigger=event_type, event_id=event_id,
                             from_state=saga.state, to_state=saga.state,
                             disposition=Disposition.LATE, note=note)
        return Outcome(saga=saga, emissions=(), history=entry)
    if t is None or event_type == DEADLINE:
        note = f"{event_type} is not expected in state {saga.state}"
        if d.is_final(saga.state):
            note += " (saga already finished: late or duplicate reply)"
        entry = HistoryEntry(at=now, trigger=event_type, event_id=event_id,
                             from_state=saga.state, to_state=saga.state,
                             disposition=Disposition.IGNORED, note=note)
        return Outcome(saga=saga, emissions=(), history=entry)
    data = {**saga.data, **_pick(t.record, payload, f"{event_type} payload"), **t.assign}
    new, emissions = _enter(d, saga, t.target, data, now, event_id=event_id, announce=t.emits)
    note = str(payload.get("reason", "")) if event_type == RESOLVE else ""
    entry = HistoryEntry(at=now, trigger=event_type, event_id=event_id, from_state=saga.state,
                         to_state=t.target, disposition=Disposition.TRANSITIONED, note=note)
    return Outcome(saga=new, emissions=emissions, history=entry)


def resolve(d: SagaDefinition, saga: SagaInstance, *, input: Mapping[str, Any],
            now: datetime) -> Outcome:
    """An operator resolves a PARKED saga (``input`` e.g. ``{"reason": ...}``).

    Raises:
        UnknownTrigger: the saga's state has no :data:`RESOLVE` transition.
    """
    if d.transition(saga.state, RESOLVE) is None:
        raise UnknownTrigger(saga.saga_id, saga.state, RESOLVE)
    return apply_event(d, saga, event_type=RESOLVE, payload=input, event_id=None, now=now)


def fire_deadline(d: SagaDefinition, saga: SagaInstance, *, now: datetime) -> Outcome:
    """The deadline of the current attempt passed (or not yet: then IGNORED).

    While ``attempts < retry.max_attempts`` the step's action is issued again with a new
    deadline (RETRIED); after that the state's :data:`DEADLINE` transition is taken.
    """
    if saga.deadline_at is None or saga.step is None or now < saga.deadline_at:
        entry = HistoryEntry(at=now, trigger=DEADLINE, event_id=None, from_state=saga.state,
                             to_state=saga.state, disposition=Disposition.IGNORED,
                             note="no deadline due")
        return Outcome(saga=saga, emissions=(), history=entry)
    step = d.step(saga.step)
    if saga.attempts < step.retry.max_attempts:
        attempt = saga.attempts + 1
        seq = saga.event_seq + 1
        emission = _emit(step.action, saga.data, seq)
        assert step.deadline is not None  # guaranteed by validate(): retries need a deadline
        new = replace(saga, attempts=attempt, event_seq=seq,
                      deadline_at=now + step.retry.deadline_for(step.deadline, attempt))
        entry = HistoryEntry(at=now, trigger=DEADLINE, event_id=None, from_state=saga.state,
                             to_state=saga.state, disposition=Disposition.RETRIED,
                             note=f"{step.name}: attempt {attempt} of {step.retry.max_attempts}")
        return Outcome(saga=new, emissions=(emission,), history=entry)
    t = d.transition(saga.state, DEADLINE)
    assert t is not None  # guaranteed by validate(): every deadline has a DEADLINE transition
    data = {**saga.data, **t.assign}
    new, emissions = _enter(d, saga, t.target, data, now, event_id=None, announce=t.emits)
    entry = HistoryEntry(at=now, trigger=DEADLINE, event_id=None, from_state=saga.state,
                         to_state=t.target, disposition=Disposition.TRANSITIONED,
                         note=f"{step.name}: deadline passed after {saga.attempts} attempt(s)")
    return Outcome(saga=new, emissions=emissions, history=entry)


RECONCILE = "@reconcile"
"""Trigger name of a request re-issued by the reconciliation job."""


def reissue(d: SagaDefinition, saga: SagaInstance, *, step: str, now: datetime,
            note: str) -> Outcome:
    """Re-issue ``step``'s action from the saga's data without changing its state (repair of
    drift found by reconciliation, e.g. a COMPLETED saga whose case is not closed).

    Disposition RETRIED, trigger :data:`RECONCILE`; the emission continues the saga's
    aggregate versions.

    Raises:
        KeyError: unknown step, or the saga data lacks a field of its action.
    """
    action = d.step(step).action
    seq = saga.event_seq + 1
    emission = _emit(action, saga.data, seq)
    entry = HistoryEntry(at=now, trigger=RECONCILE, event_id=None, from_state=saga.state,
                         to_state=saga.state, disposition=Disposition.RETRIED, note=note)
    return Outcome(saga=replace(saga, event_seq=seq), emissions=(emission,), history=entry)
