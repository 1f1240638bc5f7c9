"""Consumer-runtime handlers of the saga-orchestrator (consumer ``saga.orchestrator``).

One PROCESS handler per event type the orchestrator reacts to (the start event and every
reply trigger of the definition); other event types on the consumed topics are declared
``ignore``d. Each handler runs the orchestrator in the runtime's batch transaction, using
``ctx.conn`` (so the saga change, its history, its outbox rows and the
inbox row commit together) and ``ctx.outbox`` for the outgoing events.

An optimistic-concurrency conflict (the deadline scheduler moved the saga meanwhile) is
retried here up to ``attempts`` times — each retry re-reads the saga, which under READ
COMMITTED sees the winner's commit — then raised as
:class:`~casestream.errors.RetryableError` for the runtime's backoff. A payload the
definition cannot read (a contract breach) is a :class:`~casestream.errors.PoisonMessageError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from casestream.events import Envelope
from casestream.errors import ConcurrencyError, PoisonMessageError, RetryableError
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.outbox import OutboxSink
from services.saga.adapters.postgres import PgSagaStore
from services.saga.application.orchestrator import Handled, Orchestrator
from services.saga.application.ports import SagaStore

log = logging.getLogger(__name__)

CONSUMER = "saga.orchestrator"
TOPICS = ("outbox.event.case", "outbox.event.decision", "outbox.event.notice")


def handle_event(orchestrator: Orchestrator, conn: Any, outbox: Any, event: Envelope, *,
                 attempts: int = 3, store: Callable[[Any], SagaStore] = PgSagaStore) -> Handled:
    """Run ``orchestrator.handle`` on ``conn`` (the runtime's batch transaction), retrying
    optimistic conflicts.

    No savepoint of its own: a conflict is found by the saga's ``UPDATE ... WHERE version``
    matching no row, before this attempt wrote anything (the update is the first write of a
    transition, and a start inserts with ``ON CONFLICT DO NOTHING``), so the retry runs in
    the same transaction; any other failure leaves the handler, and the consumer runtime
    rolls back the batch and applies its messages again each in a savepoint of its own
    (``casestream.consumer``). A savepoint per event cost two round trips to PostgreSQL
    (``SAVEPOINT`` and ``RELEASE``, each a pipeline sync) and kept every batch off the
    pipelined fast path's single round trip.

    ``store(conn)`` is the saga store on the transaction's connection (an in-memory store's
    ``lambda conn: conn`` on ``casestream.testing.MemoryBus``).

    Raises:
        RetryableError: still conflicting after ``attempts`` tries.
        PoisonMessageError: the event lacks a field the saga definition needs.
    """
    for attempt in range(1, attempts + 1):
        try:
            return orchestrator.handle(store(conn), OutboxSink(outbox, conn), event)
        except ConcurrencyError as e:
            log.info("saga conflict on %s %s (attempt %d): %s", event.event_type, event.event_id,
                     attempt, e)
            if attempt == attempts:
                raise RetryableError(f"saga changed concurrently: {e}") from e
        except KeyError as e:
            raise PoisonMessageError(f"{event.event_type} {event.event_id}: {e}",
                                     reason="validation") from e
    raise AssertionError("unreachable")


def register(registry: HandlerRegistry, orchestrator: Orchestrator, *,
             also_known: Iterable[str] = (),
             store: Callable[[Any], SagaStore] = PgSagaStore) -> HandlerRegistry:
    """Register the orchestrator's handlers on ``registry``; return it.

    Args:
        also_known: event types on the consumed topics that are deliberately not handled.
        store: the saga store made from ``ctx.conn`` (see :func:`handle_event`).
    """

    def on_event(ctx: HandlerContext, event: Envelope) -> None:
        done = handle_event(orchestrator, ctx.conn, ctx.outbox, event, store=store)
        log.debug("%s %s -> saga %s: %s %s", event.event_type, event.event_id, done.saga_id,
                  done.disposition.value if done.disposition else "no-op", done.note)

    for event_type in sorted(orchestrator.handles()):
        registry.add(event_type, on_event, kind=HandlerKind.PROCESS)
    registry.ignore(*(t for t in also_known if t not in orchestrator.handles()))
    return registry
