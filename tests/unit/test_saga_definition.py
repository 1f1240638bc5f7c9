"""Start-up checks of saga definitions: each rule rejects a broken declaration."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from services.saga.domain import (
    CASE_REVIEW, DEADLINE, DefinitionError, Request, RetryPolicy, SagaDefinition, State,
    StateKind, Step, StepKind, Transition, case_review_saga, fields,
)


def _tiny(**overrides: object) -> SagaDefinition:
    """A minimal valid saga: ASK --Answered--> DONE, deadline --> GAVE_UP."""
    base = dict(
        name="tiny", start_on="Started", start_record=fields("x"), initial="ASK",
        steps=(Step(name="ask", kind=StepKind.PIVOT,
                    action=Request(event_type="Asked", payload=fields("x")),
                    deadline=timedelta(seconds=5)),),
        states=(State(name="ASK", step="ask"), State(name="DONE", kind=StateKind.TERMINAL),
                State(name="GAVE_UP", kind=StateKind.TERMINAL)),
        transitions=(Transition(source="ASK", on="Answered", target="DONE"),
                     Transition(source="ASK", on=DEADLINE, target="GAVE_UP")),
    )
    base.update(overrides)
    return SagaDefinition(**base)  # type: ignore[arg-type]


def _problems(d: SagaDefinition) -> tuple[str, ...]:
    with pytest.raises(DefinitionError) as err:
        d.validate()
    return err.value.problems


def test_case_review_is_valid_and_covers_the_brief() -> None:
    d = case_review_saga(decision_deadline=timedelta(seconds=1))
    assert d.triggers() == {"ViolationDetermined", "NoViolationFound", "DecisionFailed",
                            "NoticeIssued", "NoticeFailed", "CaseClosed", "CaseReturned"}
    assert d.emitted_event_types() == {"DecisionRequested", "NoticeRequested",
                                       "CaseCloseRequested", "CaseReturnRequested",
                                       "SagaCompleted", "SagaCompensated",
                                       "SagaManualReviewRequired", "SagaResolved",
                                       "SagaCompensationFailed"}
    assert d.compensation_states() == {"COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED"}
    assert d.success_triggers() == {"ViolationDetermined", "NoViolationFound"}
    assert [s.name for s in d.states if s.alert] == ["COMPENSATION_FAILED"]
    assert CASE_REVIEW.step("notify").kind is StepKind.PIVOT
    assert CASE_REVIEW.step("decide").compensation == "return_case"


def test_tiny_is_valid() -> None:
    assert _tiny().validate().name == "tiny"


def test_compensable_step_needs_a_compensation() -> None:
    d = _tiny(steps=(Step(name="ask", kind=StepKind.COMPENSABLE,
                          action=Request(event_type="Asked", payload=fields("x")),
                          deadline=timedelta(seconds=5)),))
    assert any("names no compensation" in p for p in _problems(d))


def test_compensation_must_be_a_retriable_step() -> None:
    ask = Step(name="ask", kind=StepKind.COMPENSABLE, compensation="ask",
               action=Request(event_type="Asked"), deadline=timedelta(seconds=5))
    assert any("must be retriable" in p for p in _problems(_tiny(steps=(ask,))))


def test_unreachable_state_is_an_error() -> None:
    d = _tiny(states=_tiny().states + (State(name="ORPHAN", kind=StateKind.TERMINAL),))
    assert "state ORPHAN is unreachable from ASK" in _problems(d)


def test_deadline_without_a_deadline_transition_is_an_error() -> None:
    d = _tiny(transitions=(Transition(source="ASK", on="Answered", target="DONE"),),
              states=_tiny().states[:2])
    assert any("has no @deadline transition" in p for p in _problems(d))


def test_request_field_missing_on_some_path_is_an_error() -> None:
    ask = replace(_tiny().steps[0], action=Request(event_type="Asked", payload=fields("x", "y")))
    assert any("needs saga data y" in p for p in _problems(_tiny(steps=(ask,))))


def test_state_that_cannot_finish_is_an_error() -> None:
    d = _tiny(states=(State(name="ASK", step="ask"), State(name="LOOP", step="ask"),
                      State(name="DONE", kind=StateKind.TERMINAL)),
              transitions=(Transition(source="ASK", on="Answered", target="DONE"),
                           Transition(source="ASK", on="Other", target="LOOP"),
                           Transition(source="ASK", on=DEADLINE, target="DONE"),
                           Transition(source="LOOP", on=DEADLINE, target="LOOP")))
    assert "no terminal state can be reached from LOOP" in _problems(d)


def test_terminal_state_with_outgoing_transition_is_an_error() -> None:
    d = _tiny(transitions=_tiny().transitions + (Transition(source="DONE", on="X", target="ASK"),))
    assert "terminal state DONE has outgoing transitions" in _problems(d)


def test_duplicate_transition_and_unknown_state_are_errors() -> None:
    d = _tiny(transitions=_tiny().transitions + (
        Transition(source="ASK", on="Answered", target="NOWHERE"),))
    problems = _problems(d)
    assert "transition ASK --Answered--> is declared twice" in problems
    assert any("state NOWHERE is not declared" in p for p in problems)


def test_retries_need_a_deadline() -> None:
    ask = replace(_tiny().steps[0], deadline=None, retry=RetryPolicy(max_attempts=2))
    assert any("retries need a deadline" in p for p in _problems(_tiny(steps=(ask,))))


def test_parked_state_is_left_only_by_resolve() -> None:
    d = _tiny(states=_tiny().states + (State(name="PARK", kind=StateKind.PARKED),),
              transitions=_tiny().transitions + (
                  Transition(source="ASK", on="Stuck", target="PARK"),
                  Transition(source="PARK", on="Answered", target="DONE")))
    assert any("may only be left by @resolve" in p for p in _problems(d))


def test_every_problem_is_reported_at_once() -> None:
    d = _tiny(initial="ASK", steps=(), states=(State(name="ASK", step="ask"),), transitions=())
    problems = _problems(d)
    assert len(problems) >= 2


def test_transition_announcement_needs_its_data_on_every_path() -> None:
    d = case_review_saga()
    broken = replace(d, transitions=tuple(
        replace(t, emits=(Request(event_type="SagaResolved",
                                  payload=fields("case_id", reason="nowhere")),))
        if t.on == "@resolve" else t for t in d.transitions))
    problems = _problems(broken)
    assert any("SagaResolved needs saga data nowhere" in p for p in problems), problems
