"""Consumer-runtime handler of the notification service (consumer ``notification.requests``).

A PROCESS handler for each request of ``REQUEST_KINDS`` (``NoticeRequested``,
``CorrectionNoticeRequested``, ``AppealRejectionNoticeRequested``; topic
``outbox.event.saga``) and for ``EvidenceOverdue`` (topic ``outbox.event.case``: the evidence
reminder), so replay never (re)sends notices; the topics' other events are declared
``ignore``d. The handler only records the notice as PENDING on ``ctx.conn`` — in the runtime's transaction, with the inbox
row — and the sender worker (:mod:`.sender_worker`) sends it. A request that cannot be read
is poison (dead-lettered).

The mail leaves the process only in the sender worker, so the handler has no effect outside
the transaction: it is a PROCESS handler (not SIDE_EFFECT), which lets the runtime apply a
batch of requests in one pipelined transaction (its fast path), and it opens no savepoint of
its own (when a handler fails the runtime rolls the batch back and applies each message in
a savepoint of its own, so a failed request leaves nothing behind).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from casestream.events import Envelope
from casestream.errors import PoisonMessageError
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.telemetry import traceparent_for_row
from casestream.outbox import OutboxSink
from services.notification.adapters.postgres import PgNoticeStore
from services.notification.application.requests import (
    REMINDER,
    REQUEST_KINDS,
    record_reminder,
    record_request,
)

CONSUMER = "notification.requests"
TOPICS = ("outbox.event.saga", "outbox.event.case")
REQUEST = "NoticeRequested"


def register(registry: HandlerRegistry, *, clock: Callable[[], datetime],
             also_known: Sequence[str] = ()) -> HandlerRegistry:
    """Register the notice request handlers on ``registry``; ``also_known`` are ignored types."""

    def on_request(ctx: HandlerContext, event: Envelope) -> None:
        try:
            # the notice (sent later, by the sender worker) continues this consumer's span
            traced = replace(event, traceparent=traceparent_for_row(event.traceparent))
            if event.event_type == REMINDER:
                record_reminder(PgNoticeStore(ctx.conn), traced, clock=clock)
            else:
                record_request(PgNoticeStore(ctx.conn), OutboxSink(ctx.outbox, ctx.conn),
                               traced, clock=clock)
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise PoisonMessageError(f"{event.event_type} {event.event_id} is unreadable: {e!r}",
                                     reason="validation") from e

    for request_type in (*REQUEST_KINDS, REMINDER):
        registry.add(request_type, on_request, kind=HandlerKind.PROCESS)
    registry.ignore(*(t for t in also_known if t not in REQUEST_KINDS and t != REMINDER))
    return registry
