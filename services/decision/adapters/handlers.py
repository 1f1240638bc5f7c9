"""Consumer-runtime handler of the decision service (consumer ``decision.requests``).

A PROCESS handler for ``DecisionRequested`` and one for ``AppealDecisionRequested`` (topic
``outbox.event.saga``; the appeal's answer is a pure rule, :func:`appeal_replies`); the saga's other
events are declared ``ignore``d. It runs :class:`~services.decision.application.decide.Decider`
on ``ctx.conn`` (the runtime's batch transaction) and appends the reply through ``ctx.outbox``,
so the decision, the reply's outbox row and the inbox row commit together. A concurrent
re-address is retried (RetryableError); a request the rules cannot read is poison
(dead-lettered). No savepoint of its own: every failure leaves the handler, and the runtime
then rolls the batch back and applies each message in a savepoint of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from casestream.events import Envelope
from casestream.errors import ConcurrencyError, PoisonMessageError, RetryableError
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.outbox import OutboxSink
from services.decision.adapters.postgres import PgDecisionStore
from services.decision.application.decide import Decider, appeal_replies

CONSUMER = "decision.requests"
TOPICS = ("outbox.event.saga",)
REQUEST = "DecisionRequested"
APPEAL_REQUEST = "AppealDecisionRequested"


def register(registry: HandlerRegistry, decider: Decider, *,
             also_known: Sequence[str] = ()) -> HandlerRegistry:
    """Register the DecisionRequested handler on ``registry``; ``also_known`` are ignored types."""

    def on_request(ctx: HandlerContext, event: Envelope) -> None:
        try:
            decider.handle(PgDecisionStore(ctx.conn), OutboxSink(ctx.outbox, ctx.conn), event)
        except ConcurrencyError as e:
            raise RetryableError(f"decision changed concurrently: {e}") from e
        except (KeyError, ValueError, TypeError) as e:
            raise PoisonMessageError(f"{REQUEST} {event.event_id} is unreadable: {e!r}",
                                     reason="validation") from e

    def on_appeal(ctx: HandlerContext, event: Envelope) -> None:
        try:
            replies = appeal_replies(event, now=decider.clock())
        except (KeyError, ValueError, TypeError) as e:
            raise PoisonMessageError(f"{APPEAL_REQUEST} {event.event_id} is unreadable: {e!r}",
                                     reason="validation") from e
        OutboxSink(ctx.outbox, ctx.conn).append(replies)

    registry.add(REQUEST, on_request, kind=HandlerKind.PROCESS)
    registry.add(APPEAL_REQUEST, on_appeal, kind=HandlerKind.PROCESS)
    registry.ignore(*(t for t in also_known if t not in (REQUEST, APPEAL_REQUEST)))
    return registry
