"""Sagas declared as data: states, steps, transitions — and the start-up check of a definition.

A saga definition is a value, not code. The engine (:mod:`services.saga.domain.engine`)
interprets it; the case-review saga (:mod:`services.saga.domain.case_review`) is one such
value. The shape follows the eventuate-tram-sagas model (``step().invoke(...)
.withCompensation(...)``), flattened into a state machine:

- a :class:`Step` is one request to a participant: its ``action`` (the request event the
  saga emits), its kind — *compensable* (names the step that undoes it), *pivot* (cannot
  be undone: once it succeeded the saga only goes forward) or *retriable* (after the pivot,
  or itself a compensation: it is retried, never undone) — its ``deadline`` and its
  :class:`RetryPolicy` (how often the action is re-issued when the deadline passes);
- a :class:`State` is where the saga waits: ACTIVE states await a step's reply, PARKED
  states await an operator, TERMINAL states await nothing. Entering a state issues its
  step's action and announces its ``emits`` (e.g. ``SagaCompleted``);
- a :class:`Transition` is a whitelisted move ``source --on--> target``; ``on`` is a reply
  event type, :data:`DEADLINE` (the step's deadline passed and its retries are used up) or
  :data:`RESOLVE` (an operator resolved a parked saga). It copies reply fields into the
  saga's data (``record``) and sets constants (``assign``).

:meth:`SagaDefinition.validate` runs at start-up and raises
:class:`~services.saga.domain.errors.DefinitionError` naming every problem: unknown names,
a compensable step without a compensation, a deadline nobody handles, unreachable states,
states from which no terminal state can be reached, request fields the saga's data cannot
hold on some path, and duplicate transitions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from services.saga.domain.errors import DefinitionError

DEADLINE = "@deadline"
"""Trigger name of a transition taken when a step's deadline passed and its retries are used up."""

RESOLVE = "@resolve"
"""Trigger name of a transition taken when an operator resolves a PARKED saga."""

FieldMap = tuple[tuple[str, str], ...]
"""``((target, source), ...)`` pairs: which key to write, and which key to read it from."""


def fields(*names: str, **renames: str) -> FieldMap:
    """Build a :data:`FieldMap`: ``fields("a", b="c")`` -> ``(("a", "a"), ("b", "c"))``.

    For a :class:`Request` the target is the payload field and the source a saga data key;
    for :attr:`Transition.record` and :attr:`SagaDefinition.start_record` the target is a
    saga data key and the source a field of the triggering event.
    """
    return tuple((n, n) for n in names) + tuple(renames.items())


class StepKind(enum.Enum):
    """How a step relates to undoing the saga (the classic saga step classification)."""

    COMPENSABLE = "compensable"  # undone by its compensation step when the saga fails later
    PIVOT = "pivot"  # cannot be undone; after it succeeds the saga only moves forward
    RETRIABLE = "retriable"  # retried until it succeeds; never undone (also: compensations)


class StateKind(enum.Enum):
    """What a saga in a state is waiting for."""

    ACTIVE = "active"  # a participant's reply to the state's step (has a step)
    PARKED = "parked"  # an operator (no step, no deadline; left only by RESOLVE)
    TERMINAL = "terminal"  # nothing: the saga is finished


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """An event the saga emits on its own topic: a request to a participant or an announcement.

    Attributes:
        event_type: the saga event type, e.g. ``"DecisionRequested"`` (catalog subject
            ``casestream.saga.<event_type>``).
        payload: payload field <- saga data key, see :func:`fields`.
    """

    event_type: str
    payload: FieldMap = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often a step's action is issued before its DEADLINE transition is taken.

    Attributes:
        max_attempts: issues in total, >= 1 (1 = never re-issued).
        backoff: factor applied to the step deadline for each further attempt
            (attempt n waits ``deadline * backoff ** (n - 1)``), >= 1.
    """

    max_attempts: int = 1
    backoff: float = 1.0

    def deadline_for(self, base: timedelta, attempt: int) -> timedelta:
        """The wait before attempt ``attempt`` (1-based) times out."""
        return base * (self.backoff ** (attempt - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One participant request of the saga.

    Attributes:
        name: unique within the definition.
        action: the request issued on entering the state that runs this step.
        kind: see :class:`StepKind`.
        compensation: name of the step that undoes this one; required for COMPENSABLE
            steps, forbidden otherwise.
        deadline: how long to wait for a reply, or None (no deadline; discouraged).
        retry: re-issue policy when the deadline passes.
    """

    name: str
    action: Request
    kind: StepKind
    compensation: str | None = None
    deadline: timedelta | None = None
    retry: RetryPolicy = RetryPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class State:
    """A state of the saga.

    Attributes:
        name: unique within the definition, e.g. ``"AWAITING_DECISION"``.
        kind: see :class:`StateKind`.
        step: the step run (and awaited) in this state; exactly the ACTIVE states have one.
        emits: events announced on entering this state (e.g. ``SagaCompleted``).
        alert: entering this state needs an operator's attention at once (the orchestrator
            logs it at ERROR and counts it, e.g. COMPENSATION_FAILED).
    """

    name: str
    kind: StateKind = StateKind.ACTIVE
    step: str | None = None
    emits: tuple[Request, ...] = ()
    alert: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A whitelisted move ``source --on--> target``.

    Attributes:
        source, target: state names.
        on: reply event type, :data:`DEADLINE` or :data:`RESOLVE`.
        record: saga data key <- field of the trigger (event payload or operator input).
        assign: constants written into the saga data (after ``record``).
        emits: events announced when this transition is taken, before the target state's
            action and announcements (e.g. ``SagaResolved`` on an operator's resolve);
            their payloads read the saga data after ``record`` and ``assign``.
    """

    source: str
    on: str
    target: str
    record: FieldMap = ()
    assign: Mapping[str, object] = field(default_factory=dict)
    emits: tuple[Request, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "assign", MappingProxyType(dict(self.assign)))


@dataclass(frozen=True, slots=True, kw_only=True)
class SagaDefinition:
    """A whole saga, as data.

    Attributes:
        name: definition name, stored with every saga instance.
        start_on: the event type that starts a saga (e.g. ``"CaseSubmitted"``).
        start_record: saga data key <- field of the start event (payload fields plus
            ``aggregate_id``).
        initial: the state a new saga enters.
        states, steps, transitions: the machine.
    """

    name: str
    start_on: str
    start_record: FieldMap
    initial: str
    states: tuple[State, ...]
    steps: tuple[Step, ...]
    transitions: tuple[Transition, ...]

    # -- lookups ---------------------------------------------------------------------
    def state(self, name: str) -> State:
        """The state called ``name``. Raises KeyError if unknown."""
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def step(self, name: str) -> Step:
        """The step called ``name``. Raises KeyError if unknown."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def transition(self, source: str, on: str) -> Transition | None:
        """The transition leaving ``source`` on trigger ``on``, or None if not whitelisted."""
        for t in self.transitions:
            if t.source == source and t.on == on:
                return t
        return None

    def triggers(self) -> frozenset[str]:
        """Every event type that drives a transition (excludes DEADLINE and RESOLVE)."""
        return frozenset(t.on for t in self.transitions if not t.on.startswith("@"))

    def emitted_event_types(self) -> frozenset[str]:
        """Every event type the saga can emit (step actions and state announcements)."""
        types = {s.action.event_type for s in self.steps}
        types.update(r.event_type for st in self.states for r in st.emits)
        types.update(r.event_type for t in self.transitions for r in t.emits)
        return frozenset(types)

    def requests(self) -> tuple[Request, ...]:
        """Every request the saga can emit: step actions, state and transition announcements."""
        return (tuple(s.action for s in self.steps) + tuple(r for st in self.states for r in st.emits)
                + tuple(r for t in self.transitions for r in t.emits))

    def compensation_states(self) -> frozenset[str]:
        """States in which compensation has begun: those running a compensation step and
        every state reachable from them (e.g. COMPENSATING, COMPENSATED, COMPENSATION_FAILED)."""
        comp_steps = {s.compensation for s in self.steps if s.compensation}
        found = {st.name for st in self.states if st.step in comp_steps}
        frontier = list(found)
        while frontier:
            here = frontier.pop()
            for t in self.transitions:
                if t.source == here and t.target not in found:
                    found.add(t.target)
                    frontier.append(t.target)
        return frozenset(found)

    def compensation_confirmations(self) -> frozenset[str]:
        """Reply event types that confirm a compensation step (e.g. CaseReturned)."""
        comp_steps = {s.compensation for s in self.steps if s.compensation}
        states = {st.name for st in self.states if st.step in comp_steps}
        return frozenset(t.on for t in self.transitions
                         if t.source in states and not t.on.startswith("@"))

    def compensation_abandoned_states(self) -> frozenset[str]:
        """States where compensation began but was never confirmed and no longer runs
        (e.g. COMPENSATION_FAILED): compensation states without a step that no
        confirmation leads to."""
        comp_steps = {s.compensation for s in self.steps if s.compensation}
        runners = {st.name for st in self.states if st.step in comp_steps}
        confirmed = {t.target for t in self.transitions
                     if t.source in runners and not t.on.startswith("@")}
        return frozenset(self.compensation_states() - runners - confirmed)

    def success_triggers(self) -> frozenset[str]:
        """Reply event types that report a *compensable* step's success: the triggers that
        leave a state running a compensable step for a state where compensation has not
        begun (e.g. ViolationDetermined, NoViolationFound)."""
        comp = self.compensation_states()
        compensable = {s.name for s in self.steps if s.kind is StepKind.COMPENSABLE}
        states = {st.name for st in self.states if st.step in compensable}
        return frozenset(t.on for t in self.transitions
                         if t.source in states and t.target not in comp
                         and not t.on.startswith("@"))

    def is_final(self, state: str) -> bool:
        """True if a saga in ``state`` waits for no participant (TERMINAL or PARKED)."""
        return self.state(state).kind is not StateKind.ACTIVE

    # -- start-up check --------------------------------------------------------------
    def validate(self) -> SagaDefinition:
        """Check the definition; return it unchanged.

        Raises:
            DefinitionError: listing every problem found (see the module docstring).
        """
        problems = list(_problems(self))
        if problems:
            raise DefinitionError(self.name, problems)
        return self


def _dupes(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dupes: set[str] = set()
    for n in names:
        (dupes if n in seen else seen).add(n)
    return dupes


def _problems(d: SagaDefinition) -> Iterable[str]:
    state_names = {s.name for s in d.states}
    step_names = {s.name for s in d.steps}
    for dupe in sorted(_dupes(s.name for s in d.states)):
        yield f"state {dupe} is declared twice"
    for dupe in sorted(_dupes(s.name for s in d.steps)):
        yield f"step {dupe} is declared twice"
    if d.initial not in state_names:
        yield f"initial state {d.initial} is not declared"
        return
    yield from _step_problems(d, step_names)
    yield from _state_problems(d, step_names)
    yield from _transition_problems(d, state_names)
    yield from _graph_problems(d, state_names)


def _step_problems(d: SagaDefinition, step_names: set[str]) -> Iterable[str]:
    used = {s.step for s in d.states if s.step}
    for step in d.steps:
        if step.kind is StepKind.COMPENSABLE:
            if step.compensation is None:
                yield f"step {step.name} is compensable but names no compensation"
            elif step.compensation not in step_names:
                yield f"step {step.name}: compensation {step.compensation} is not a declared step"
            elif d.step(step.compensation).kind is not StepKind.RETRIABLE:
                yield (f"step {step.name}: compensation {step.compensation} must be retriable "
                       "(a compensation is retried, never undone)")
        elif step.compensation is not None:
            yield f"step {step.name} is {step.kind.value} and must not name a compensation"
        if step.retry.max_attempts < 1:
            yield f"step {step.name}: retry.max_attempts must be >= 1"
        if step.retry.backoff < 1:
            yield f"step {step.name}: retry.backoff must be >= 1"
        if step.deadline is not None and step.deadline <= timedelta(0):
            yield f"step {step.name}: deadline must be positive"
        if step.deadline is None and step.retry.max_attempts > 1:
            yield f"step {step.name}: retries need a deadline"
        if step.name not in used:
            yield f"step {step.name} is not run in any state"


def _state_problems(d: SagaDefinition, step_names: set[str]) -> Iterable[str]:
    if d.state(d.initial).kind is not StateKind.ACTIVE:
        yield f"initial state {d.initial} must be active"
    outgoing = {t.source for t in d.transitions}
    for st in d.states:
        if st.kind is StateKind.ACTIVE and st.step is None:
            yield f"state {st.name} is active but runs no step"
        if st.kind is not StateKind.ACTIVE and st.step is not None:
            yield f"state {st.name} is {st.kind.value} and must not run a step"
        if st.step is not None and st.step not in step_names:
            yield f"state {st.name}: step {st.step} is not declared"
        if st.kind is StateKind.TERMINAL and st.name in outgoing:
            yield f"terminal state {st.name} has outgoing transitions"
        if st.kind is not StateKind.TERMINAL and st.name not in outgoing:
            yield f"state {st.name} is not terminal but has no way out"
        if st.step in step_names and d.step(st.step).deadline is not None \
                and d.transition(st.name, DEADLINE) is None:
            yield f"state {st.name}: deadline of step {st.step} has no {DEADLINE} transition"


def _transition_problems(d: SagaDefinition, state_names: set[str]) -> Iterable[str]:
    seen: set[tuple[str, str]] = set()
    for t in d.transitions:
        if (t.source, t.on) in seen:
            yield f"transition {t.source} --{t.on}--> is declared twice"
        seen.add((t.source, t.on))
        for end in (t.source, t.target):
            if end not in state_names:
                yield f"transition {t.source} --{t.on}--> {t.target}: state {end} is not declared"
        if t.source not in state_names:
            continue
        src = d.state(t.source)
        if t.on == DEADLINE and (src.step is None or src.step not in {s.name for s in d.steps}
                                 or d.step(src.step).deadline is None):
            yield f"transition {t.source} --{DEADLINE}-->: the state's step has no deadline"
        if t.on == RESOLVE and src.kind is not StateKind.PARKED:
            yield f"transition {t.source} --{RESOLVE}-->: only parked states are resolved"
        if src.kind is StateKind.PARKED and t.on != RESOLVE:
            yield f"parked state {t.source} may only be left by {RESOLVE}, not {t.on}"


def _graph_problems(d: SagaDefinition, state_names: set[str]) -> Iterable[str]:
    edges = [t for t in d.transitions if t.source in state_names and t.target in state_names]
    # reachability from the initial state
    reached = {d.initial}
    frontier = [d.initial]
    while frontier:
        here = frontier.pop()
        for t in edges:
            if t.source == here and t.target not in reached:
                reached.add(t.target)
                frontier.append(t.target)
    for name in sorted(state_names - reached):
        yield f"state {name} is unreachable from {d.initial}"
    # every state can still finish
    terminal = {s.name for s in d.states if s.kind is StateKind.TERMINAL}
    can_finish = set(terminal)
    changed = True
    while changed:
        changed = False
        for t in edges:
            if t.target in can_finish and t.source not in can_finish:
                can_finish.add(t.source)
                changed = True
    for name in sorted(reached - can_finish):
        yield f"no terminal state can be reached from {name}"
    yield from _data_problems(d, edges)


def _data_problems(d: SagaDefinition, edges: list[Transition]) -> Iterable[str]:
    """Every request field must be in the saga data on every path into its state."""
    available: dict[str, frozenset[str]] = {d.initial: frozenset(k for k, _ in d.start_record)}
    frontier = [d.initial]
    while frontier:
        here = frontier.pop()
        for t in edges:
            if t.source != here:
                continue
            out = available[here] | {k for k, _ in t.record} | set(t.assign)
            before = available.get(t.target)
            after = out if before is None else before & out
            if after != before:
                available[t.target] = after
                frontier.append(t.target)
    for st in d.states:
        if st.name not in available:
            continue
        requests = list(st.emits)
        if st.step is not None and st.step in {s.name for s in d.steps}:
            requests.append(d.step(st.step).action)
        for req in requests:
            missing = sorted({src for _, src in req.payload} - available[st.name])
            if missing:
                yield (f"state {st.name}: {req.event_type} needs saga data {', '.join(missing)} "
                       "which some path into the state does not provide")
    for t in edges:
        if t.source not in available:
            continue
        out = available[t.source] | {k for k, _ in t.record} | set(t.assign)
        for req in t.emits:
            missing = sorted({src for _, src in req.payload} - out)
            if missing:
                yield (f"transition {t.source} --{t.on}--> {t.target}: {req.event_type} needs "
                       f"saga data {', '.join(missing)} which some path does not provide")
