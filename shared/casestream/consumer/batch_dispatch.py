"""Verdicts and handler calls of one record (no database access of its own).

:class:`Dispatcher` decides the :class:`~casestream.consumer.batch_model.Action` of a decoded
record (version guard, duplicates, re-drive ``accept-gap``, strict types) and hands the records
to apply to the runner both engines share (:class:`casestream.handlers.runner.HandlerRunner`:
runs for batch handlers, contexts, sync and async calls), inside their tracing spans: a
per-event handler runs in a CONSUMER span that is a child of the message's ``traceparent``, a
batch handler call in one span linked to every message's context.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from casestream import telemetry
from casestream.consumer.batch_model import Action, Item
from casestream.consumer.deadletters import H_ACCEPT_GAP
from casestream.consumer.handlerloop import HandlerLoop
from casestream.consumer.inbox import GuardRow
from casestream.consumer.records import Record
from casestream.handlers.cursors import SharedCursor
from casestream.handlers.guard import FirstSeenPolicy, Verdict
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.registry import HandlerRegistry, OutboxAppender
from casestream.handlers.runner import HandlerRunner, verdict


class Dispatcher:
    """Verdicts and handler dispatch of one consumer.

    Args:
        consumer: inbox consumer name (``HandlerContext.consumer``, span names).
        handlers: the handler registry.
        mode: LIVE or REPLAY (selects handlers).
        outbox: ``HandlerContext.outbox`` of every call.
        first_seen: first-seen version policy of the guard.
        strict_types: an event type without a handler is ``UNKNOWN_STRICT`` (dead-lettered).
        redrive_topic: records from this topic with ``accept-gap: true`` may close a gap.
        loop: await coroutine handlers there, by its callers (a key-parallel consumer's
            shared loop, ``key_concurrency`` calls at once); default: an event loop of its own.
    """

    def __init__(self, *, consumer: str, handlers: HandlerRegistry, mode: ProcessingMode,
                 outbox: OutboxAppender, first_seen: FirstSeenPolicy, strict_types: bool,
                 redrive_topic: str, loop: HandlerLoop | None = None) -> None:
        self.consumer = consumer
        self.handlers = handlers
        self.mode = mode
        self.outbox = outbox
        self.first_seen = first_seen
        self.strict_types = strict_types
        self.redrive_topic = redrive_topic
        #: runs, contexts and calls (one thread uses a dispatcher at a time)
        self.runner = HandlerRunner(consumer=consumer, handlers=handlers, mode=mode,
                                    outbox=outbox, loop=loop)

    @property
    def shared_cursor(self) -> SharedCursor:
        """The cursor the plain and batch handlers share."""
        return self.runner.shared_cursor

    def has_side_effects(self, event_type: str) -> bool:
        """True if a ``SIDE_EFFECT`` handler takes ``event_type`` in this mode."""
        return self.handlers.has_side_effects(event_type, self.mode)

    def item_has_side_effects(self, item: Item) -> bool:
        """True if a ``SIDE_EFFECT`` handler takes one of the events of ``item``."""
        if item.events is None:
            return self.handlers.has_side_effects(item.env.event_type, self.mode)
        return any(self.handlers.has_side_effects(e.event_type, self.mode) for e in item.events)

    def action(self, item: Item, known: set[str], seen: set[str],
               guards: dict[tuple[str, str], GuardRow]) -> Action:
        """What to do with ``item`` given the event ids recorded before (``known``) and in this
        batch (``seen``) and the guard rows of the batch.

        Raises:
            PoisonMessageError: the version is not a valid aggregate version (reason ``validation``).
        """
        env = item.env
        if env.event_id in known or env.event_id in seen:
            return Action.DUPLICATE
        g = guards.get(item.key)
        last = g.last_version if g is not None else None
        v = verdict(last, env.aggregate_version, self.first_seen)
        if v is Verdict.STALE:
            return Action.STALE
        if v is Verdict.GAP:
            if item.rec.topic == self.redrive_topic and item.rec.header(H_ACCEPT_GAP) == "true":
                return Action.ACCEPT_GAP
            return Action.HOLD
        if self.strict_types and not all(self.handlers.knows(e.event_type) for e in item.handled):
            return Action.UNKNOWN_STRICT
        return Action.APPLY

    def runs(self, apply: list[Item]) -> list[tuple[list[Item], tuple[Any, ...]]]:
        """Split ``apply`` into runs (``HandlerRunner.runs``): ``(items, batch handlers)``, or
        ``([item], ())`` for an event whose handlers are not all batch handlers. Order is kept;
        a record an event upcaster made several events of takes one place per event."""
        return [(run, hs if batch else ())
                for run, hs, batch in self.runner.runs(_each_event(apply), _event_type)]

    def run_batch(self, conn: Any, run: list[Item], hs: tuple[Any, ...]) -> None:
        """Call the batch handlers ``hs`` once with the events of ``run``."""
        positions = [(i.rec.topic, i.rec.partition, i.rec.offset) for i in run]
        with telemetry.consume_batch_span(self.consumer, [(i.rec, i.env) for i in run]):
            self.runner.call_batch(conn, hs, positions, [i.env for i in run])

    def run_item(self, conn: Any, item: Item) -> int:
        """Run the handlers of every event of ``item`` in order; returns how many had none."""
        if item.events is None:
            return self.run_handlers(conn, item.rec, item.env)
        return sum(self.run_handlers(conn, item.rec, e) for e in item.events)

    def run_handlers(self, conn: Any, rec: Record, env: Any) -> int:
        """Run the handlers of ``env``; returns 1 if the type has none (counted as unknown)."""
        hs = self.handlers.handlers_for(env.event_type, self.mode)
        if not hs:
            return 0 if self.handlers.knows(env.event_type) else 1
        with telemetry.consume_span(self.consumer, rec, env):
            self.runner.call_each(conn, hs, (rec.topic, rec.partition, rec.offset), env)
        return 0

    def awaits(self, item: Item) -> bool:
        """True if a coroutine (``async def``) handler takes the event of ``item``."""
        return any(h.awaits for h in self.handlers.handlers_for(item.env.event_type, self.mode))

    async def run_handlers_async(self, conn: Any, rec: Record, env: Any) -> int:
        """:meth:`run_handlers` on the running event loop: coroutine handlers are awaited
        there, so other aggregates' handlers run while this one waits."""
        hs = self.handlers.handlers_for(env.event_type, self.mode)
        if not hs:
            return 0 if self.handlers.knows(env.event_type) else 1
        with telemetry.consume_span(self.consumer, rec, env):  # interleaved calls: a cursor each
            await self.runner.call_each_async(conn, hs, (rec.topic, rec.partition, rec.offset), env)
        return 0

    def run_chains(self, conn: Any, chains: list[list[Item]],
                   concurrency: int) -> tuple[int, list[tuple[Item, BaseException]]]:
        """Await the handlers of every item of ``chains`` (each chain in order, up to
        ``concurrency`` chains at once; on the shared ``loop``: by its callers, which every
        unit shares). The first failure stops every chain before its next item.

        Returns:
            (events that had no handler, [(item, exception)] of the failure, if any).
        """
        def call(it: Item) -> Any:
            return self.run_handlers_async(conn, it.rec, it.env)

        loop = self.runner.loop
        if loop is not None:
            return loop.run_chains(chains, call)
        pending = deque(chains)
        failed: list[tuple[Item, BaseException]] = []

        async def caller() -> int:  # one of ``concurrency``: takes chains until none is left
            unknown = 0
            while pending and not failed:
                for it in pending.popleft():
                    try:
                        unknown += await call(it)
                    except Exception as e:  # noqa: BLE001 - raised by the caller, after the others
                        failed.append((it, e))
                    if failed:
                        break
            return unknown

        async def all_chains() -> int:
            callers = min(concurrency, len(chains))
            return sum(await asyncio.gather(*(caller() for _ in range(callers))))

        return self.run(all_chains()), failed

    def wait(self, result: Any) -> None:
        """Await ``result`` when a handler returned an awaitable (``HandlerRunner.wait``)."""
        self.runner.wait(result)

    def run(self, coro: Any) -> Any:
        """Run coroutine ``coro`` to completion on the runner's own event loop."""
        return self.runner.run(coro)

    def close(self) -> None:
        """Close the runner's event loop, if one was made, and drop the shared cursor."""
        self.runner.close()


def _event_type(it: Item) -> str:
    return it.env.event_type


def _each_event(items: list[Item]) -> list[Item]:
    """``items`` with each record an event upcaster made several events of expanded to one
    item per event (same record: a failure is still pinned to that message)."""
    if all(it.events is None for it in items):
        return items
    return [x for it in items
            for x in ((it,) if it.events is None else (Item(it.rec, e) for e in it.events))]
