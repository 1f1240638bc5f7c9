"""The suite's PROCESS handlers run in the consumer runtime's batch transaction without a
savepoint of their own (a savepoint per event is two round trips to PostgreSQL and the
runtime already isolates a failed message), and a failure still leaves the handler."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.handlers.processing import ProcessingMode
from casestream.errors import PoisonMessageError
from casestream.events.envelope import Envelope, new_event

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class NoSavepointConn:
    """Fails any savepoint: the handler must use the caller's transaction as it is."""

    def transaction(self) -> Any:
        raise AssertionError("the handler opened a savepoint of its own")


def ctx() -> HandlerContext:
    return HandlerContext(conn=NoSavepointConn(), outbox=None,  # type: ignore[arg-type]
                          mode=ProcessingMode.LIVE, consumer="test")


def request(event_type: str, case_id: str = "case-1") -> Envelope:
    return new_event(event_type=event_type, aggregate_type="saga", aggregate_id="saga-1",
                     aggregate_version=1, tenant_id="tenant-a", source="saga", actor_id="svc",
                     correlation_id="saga-1", payload={"case_id": case_id})


def only_handler(registry: HandlerRegistry, event_type: str) -> Any:
    (h,) = registry.handlers_for(event_type, ProcessingMode.LIVE)
    assert h.kind is HandlerKind.PROCESS
    return h.fn


def test_the_decision_handler_decides_in_the_batch_transaction() -> None:
    from services.decision.adapters import handlers
    from services.decision.application.decide import Decider

    seen: list[str] = []

    class Recording(Decider):
        def handle(self, store: Any, sink: Any, request: Envelope) -> Any:
            seen.append(request.event_id)
            if request.payload.get("case_id") == "unreadable":
                raise KeyError("severity")

    fn = only_handler(handlers.register(HandlerRegistry(), Recording(clock=lambda: T0)),
                      handlers.REQUEST)
    ev = request(handlers.REQUEST)
    fn(ctx(), ev)
    assert seen == [ev.event_id]
    bad = request(handlers.REQUEST, case_id="unreadable")
    with pytest.raises(PoisonMessageError):  # leaves the handler: the runtime's savepoint path
        fn(ctx(), bad)


def test_the_notice_request_handler_records_in_the_batch_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from services.notification.adapters import handlers

    recorded: list[str] = []

    def record_request(store: Any, sink: Any, event: Envelope, *, clock: Any) -> None:
        recorded.append(event.event_id)
        if event.payload.get("case_id") == "unreadable":
            raise KeyError("recipient")

    monkeypatch.setattr(handlers, "record_request", record_request)
    registry = handlers.register(HandlerRegistry(), clock=lambda: T0)
    fn = only_handler(registry, handlers.REQUEST)
    assert not registry.has_side_effects(handlers.REQUEST, ProcessingMode.LIVE)
    ev = request(handlers.REQUEST)
    fn(ctx(), ev)
    assert recorded == [ev.event_id]
    bad = request(handlers.REQUEST, case_id="unreadable")
    with pytest.raises(PoisonMessageError):
        fn(ctx(), bad)
