"""Unit tests of the case service's saga-request handlers: event -> command mapping and how
failures steer the consumer runtime (poison vs retryable). No database: the use cases are
replaced by a recorder."""

from __future__ import annotations

from typing import Any

import pytest

from casestream.events.envelope import Envelope, new_event
from casestream.errors import ConcurrencyError, PoisonMessageError, RetryableError
from casestream.handlers.registry import DiscardingOutbox, HandlerContext, HandlerKind
from casestream.handlers.processing import ProcessingMode
from services.case.adapters.saga_requests import IGNORED, build_registry
from services.case.application import CloseCase, ReturnCase
from services.case.domain import CaseNotFound, CaseValidationError, InvalidTransition

CASE_ID = "6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab"


class Recorder:
    def __init__(self, error: Exception | None = None, changed: bool = True) -> None:
        self.commands: list[Any] = []
        self.error, self.changed = error, changed

    def _run(self, cmd: Any) -> bool:
        self.commands.append(cmd)
        if self.error is not None:
            raise self.error
        return self.changed

    def close_case(self, uow: Any, cmd: CloseCase) -> bool:
        return self._run(cmd)

    def return_case(self, uow: Any, cmd: ReturnCase) -> bool:
        return self._run(cmd)


def ctx() -> HandlerContext:
    return HandlerContext(conn=None, outbox=DiscardingOutbox(), mode=ProcessingMode.LIVE,
                          consumer="case.saga-requests")


def request(event_type: str = "CaseCloseRequested", **payload: Any) -> Envelope:
    body: dict[str, Any] = {"case_id": CASE_ID, "outcome": "violation", "penalty_cents": 900}
    if event_type == "CaseReturnRequested":
        body = {"case_id": CASE_ID, "reason": "decision failed"}
    body.update(payload)
    return new_event(event_type=event_type, aggregate_type="saga", aggregate_id="saga-1",
                     aggregate_version=2, payload=body, tenant_id="t-9", source="saga",
                     actor_id="saga-orchestrator", correlation_id="corr-1",
                     traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def run(recorder: Recorder, event: Envelope) -> None:
    [handler] = build_registry(recorder).handlers_for(event.event_type,  # type: ignore[arg-type]
                                                      ProcessingMode.LIVE)
    assert handler.kind is HandlerKind.PROCESS
    handler.fn(ctx(), event)


def test_close_request_maps_to_close_command() -> None:
    recorder = Recorder()
    event = request()
    run(recorder, event)
    [cmd] = recorder.commands
    assert isinstance(cmd, CloseCase)
    assert (cmd.tenant_id, cmd.case_id, cmd.outcome, cmd.penalty_cents, cmd.actor_id) == (
        "t-9", CASE_ID, "violation", 900, "saga-orchestrator")
    assert (cmd.causation.causation_id, cmd.causation.correlation_id) == (event.event_id, "corr-1")
    assert cmd.causation.traceparent == event.traceparent


def test_return_request_maps_to_return_command() -> None:
    recorder = Recorder()
    run(recorder, request("CaseReturnRequested"))
    [cmd] = recorder.commands
    assert isinstance(cmd, ReturnCase) and cmd.reason == "decision failed"


def test_other_saga_events_are_known_but_not_handled() -> None:
    registry = build_registry(Recorder())  # type: ignore[arg-type]
    for event_type in IGNORED:
        assert registry.knows(event_type)
        assert registry.handlers_for(event_type, ProcessingMode.LIVE) == ()
    assert set(IGNORED) == {"DecisionRequested", "NoticeRequested", "SagaCompleted",
                            "SagaCompensated"}


def test_never_runs_in_replay() -> None:
    registry = build_registry(Recorder())  # type: ignore[arg-type]
    assert registry.handlers_for("CaseCloseRequested", ProcessingMode.REPLAY) == ()


@pytest.mark.parametrize(("error", "reason"), [
    (CaseNotFound(CASE_ID), "case_not_found"),
    (InvalidTransition(CASE_ID, "returned", "close"), "invalid_transition"),
    (CaseValidationError("penalty_cents", "a violation needs a penalty"), "validation"),
])
def test_hopeless_requests_are_poison(error: Exception, reason: str) -> None:
    with pytest.raises(PoisonMessageError) as err:
        run(Recorder(error), request())
    assert err.value.reason == reason


def test_lost_race_is_retryable() -> None:
    with pytest.raises(RetryableError):
        run(Recorder(ConcurrencyError("case", CASE_ID, 2, 3)), request())


@pytest.mark.parametrize("payload", [{"case_id": "not-a-uuid"}, {"case_id": None}])
def test_bad_case_id_is_poison(payload: dict[str, Any]) -> None:
    recorder = Recorder()
    with pytest.raises(PoisonMessageError) as err:
        run(recorder, request(**payload))
    assert err.value.reason == "validation" and recorder.commands == []


def test_missing_field_is_poison() -> None:
    event = new_event(event_type="CaseReturnRequested", aggregate_type="saga",
                      aggregate_id="saga-1", aggregate_version=1, payload={"case_id": CASE_ID},
                      tenant_id="t", source="saga", actor_id="saga", correlation_id="c")
    with pytest.raises(PoisonMessageError):
        run(Recorder(), event)


def test_repeated_request_is_fine() -> None:
    run(Recorder(changed=False), request())  # already closed identically: no error
