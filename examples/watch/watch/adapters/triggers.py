"""Consumer ``watch.triggers`` on ``outbox.event.case``: a closed or returned case fires its
watches (``PROCESS`` handlers: live only, never in a replay).

Each handler runs in the consumer's batch transaction: the watches' new versions, the
``WatchTriggered`` outbox rows, the inbox row and the version-guard row commit together, so
a re-delivered case event triggers nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.events import Envelope
from casestream.outbox import OutboxSink
from watch.adapters.postgres import PgWatchRepository
from watch.application import WatchRepository, on_case_event
from watch.domain import TRIGGERS

CONSUMER = "watch.triggers"
TOPICS = ("outbox.event.case",)


def registry(event_types: Iterable[str] = (), *,
             repository: Callable[[Any], WatchRepository] = PgWatchRepository) -> HandlerRegistry:
    """PROCESS handlers for :data:`~watch.domain.TRIGGERS`; the other ``event_types`` of the
    topic are ignored. ``repository(ctx.conn)`` is the watches' store: PostgreSQL on the
    consumer's connection; a unit test on ``casestream.testing.MemoryBus`` passes
    ``lambda conn: conn`` with its in-memory repository as the bus's state."""

    def fire(ctx: HandlerContext, event: Envelope) -> None:
        """Fire the watches of ``event``'s case (see :func:`watch.application.on_case_event`)."""
        on_case_event(repository(ctx.conn), OutboxSink(ctx.outbox, ctx.conn), event)

    fire.__qualname__ = "fire"  # the handler's name in logs and dead-letter headers
    reg = HandlerRegistry()
    for event_type in TRIGGERS:
        reg.add(event_type, fire, kind=HandlerKind.PROCESS)
    reg.ignore(*(t for t in event_types if t not in TRIGGERS))
    return reg
