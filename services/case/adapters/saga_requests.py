"""Consumer handlers of the case service: the saga's close and return requests.

Consumer ``case.saga-requests`` (Kafka group id = inbox consumer name) reads
``outbox.event.saga``. ``CaseCloseRequested`` -> CaseClosed, ``CaseReturnRequested`` ->
CaseReturned (the saga's compensation); the saga's other facts are declared ignored.
Both handlers are ``PROCESS`` handlers: they change the case and append events to the
outbox inside the runtime's transaction, so the inbox row, the case row and the outbox
row commit together (a redelivered request finds its inbox row and does nothing; a
second request for an already-applied change is a domain no-op).

Test hook (documented, deterministic; used by the saga's integration tests): a
``CaseReturnRequested`` whose reason contains ``[fail-compensation]`` is refused every time,
one containing ``[fail-compensation:N]`` is refused for the first N requests of that saga
(counted from this consumer's inbox rows). A refusal changes nothing and sends no reply, so
the saga re-issues the request on its deadline and, after its bounded retries, ends in
COMPENSATION_FAILED.

Failures steer the runtime (casestream.handlers): a request for an unknown case, a case
in a state that forbids it, or an invalid payload can never succeed -> PoisonMessageError
(dead-lettered to ``case.saga-requests.dlq``); a lost optimistic race -> RetryableError.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from casestream.events import Envelope
from casestream.errors import ConcurrencyError, PoisonMessageError, RetryableError
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry

from services.case.adapters.postgres import PgUnitOfWork
from services.case.application.commands import CloseCase, ReturnCase
from services.case.application.integration import Causation
from services.case.application.service import CaseService
from services.case.domain.errors import CaseNotFound, CaseValidationError, InvalidTransition

CONSUMER = "case.saga-requests"
TOPICS = ("outbox.event.saga",)
IGNORED = ("DecisionRequested", "NoticeRequested", "SagaCompleted", "SagaCompensated")
FAIL_COMPENSATION = re.compile(r"\[fail-compensation(?::(\d+))?\]")

log = logging.getLogger(__name__)


def _causation(event: Envelope) -> Causation:
    return Causation(correlation_id=event.correlation_id, causation_id=event.event_id,
                     traceparent=event.traceparent)


def _field(event: Envelope, name: str) -> Any:
    try:
        return event.payload[name]
    except KeyError:
        raise PoisonMessageError(f"{event.event_type} {event.event_id} has no {name}",
                                 reason="validation") from None


def _case_id(event: Envelope) -> str:
    raw = str(_field(event, "case_id"))
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise PoisonMessageError(f"{event.event_type} {event.event_id}: case_id {raw!r} is not "
                                 "a UUID", reason="validation") from None


def _apply(event: Envelope, action: Callable[[], bool]) -> None:
    try:
        changed = action()
    except CaseNotFound as e:
        raise PoisonMessageError(str(e), reason="case_not_found") from e
    except InvalidTransition as e:
        raise PoisonMessageError(str(e), reason="invalid_transition") from e
    except CaseValidationError as e:
        raise PoisonMessageError(str(e), reason="validation") from e
    except ConcurrencyError as e:
        raise RetryableError(str(e)) from e
    if not changed:
        log.info("%s %s: case already in the requested state, nothing to do",
                 event.event_type, event.event_id)


def _refuse_for_test(ctx: HandlerContext, event: Envelope) -> bool:
    """The ``[fail-compensation(:N)]`` test hook (module docstring); True = refused."""
    match = FAIL_COMPENSATION.search(str(event.payload.get("reason", "")))
    if match is None:
        return False
    if match.group(1) is not None:
        earlier = ctx.conn.execute(
            """SELECT count(*) FROM consumer_inbox WHERE consumer = %s AND event_type = %s
               AND aggregate_id = %s AND event_id <> %s""",
            (CONSUMER, event.event_type, event.aggregate_id, event.event_id)).fetchone()[0]
        if earlier >= int(match.group(1)):
            return False
    log.warning("%s %s refused by the [fail-compensation] test hook", event.event_type,
                event.event_id)
    return True


def build_registry(service: CaseService) -> HandlerRegistry:
    """Return the handler registry of consumer ``case.saga-requests``."""
    registry = HandlerRegistry()

    @registry.on("CaseCloseRequested", kind=HandlerKind.PROCESS)
    def close_requested(ctx: HandlerContext, event: Envelope) -> None:
        uow = PgUnitOfWork.bound(ctx.conn, ctx.outbox.append)
        cmd = CloseCase(tenant_id=event.tenant_id, case_id=_case_id(event),
                        outcome=_field(event, "outcome"),
                        penalty_cents=event.payload.get("penalty_cents"),
                        actor_id=event.actor_id, causation=_causation(event))
        _apply(event, lambda: service.close_case(uow, cmd))

    @registry.on("CaseReturnRequested", kind=HandlerKind.PROCESS)
    def return_requested(ctx: HandlerContext, event: Envelope) -> None:
        if _refuse_for_test(ctx, event):
            return
        uow = PgUnitOfWork.bound(ctx.conn, ctx.outbox.append)
        cmd = ReturnCase(tenant_id=event.tenant_id, case_id=_case_id(event),
                         reason=_field(event, "reason"), actor_id=event.actor_id,
                         causation=_causation(event))
        _apply(event, lambda: service.return_case(uow, cmd))

    registry.ignore(*IGNORED)
    return registry
