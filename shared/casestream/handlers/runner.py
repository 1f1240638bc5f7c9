"""The one core that runs decoded events through a registry's handlers (no I/O of its own).

Used by both engines: the live consumer (``casestream.consumer.batch_dispatch``: inbox, spans,
savepoints and retries around it) and replay (``casestream.replay.applier``: an in-memory guard
and ``COPY`` around it). What it does, the same way for both:

- **runs**: consecutive events whose handlers are all batch handlers with the same functions
  (and kinds) form one run, so one batch handler registered for several event types still gets
  one call; an event with a per-event handler (or with none) is a run of its own;
- **context**: the :class:`~casestream.handlers.HandlerContext` of a call (position, positions
  of a run, the shared cursor);
- **calls**: a batch handler once per run, a per-event handler per event, the handlers of one
  run one after the other; a coroutine (``async def``) handler is awaited before the next call
  (on the runner's own event loop, or on a shared handler loop its owner passes in);
- **verdicts**: :func:`verdict` is the guard rule (:func:`casestream.handlers.guard.decide`)
  with an invalid version reported as a poison message.

Positions are ``(topic, partition, offset)`` tuples; events are decoded envelopes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from casestream.errors import PoisonMessageError
from casestream.handlers.cursors import SharedCursor
from casestream.handlers.guard import FirstSeenPolicy, Verdict, decide
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.registry import HandlerContext, HandlerRegistry, OutboxAppender, RegisteredHandler

Position = tuple[str, int, int]
Handlers = tuple[RegisteredHandler, ...]
T = TypeVar("T")


class AwaitLoop(Protocol):
    """Where a runner awaits coroutine handlers when its owner shares one loop among runners
    (``casestream.consumer.handlerloop.HandlerLoop``): ``run_chains(chains, call)`` awaits
    ``call(item)`` for the items of each chain in order and returns ``(unknown, failed)``."""

    def run_chains(self, chains: list[list[Any]], call: Callable[[Any], Any]) -> tuple[int, list[Any]]: ...


def verdict(last_version: int | None, version: int, policy: FirstSeenPolicy) -> Verdict:
    """The guard verdict of an event (:func:`casestream.handlers.guard.decide`).

    Raises:
        PoisonMessageError: ``version`` is not a valid aggregate version (reason ``validation``).
    """
    try:
        return decide(last_version, version, policy)
    except ValueError as e:
        raise PoisonMessageError(str(e), reason="validation") from e


class HandlerRunner:
    """Runs events through the handlers of ``handlers`` that run in ``mode``.

    Args:
        consumer: ``HandlerContext.consumer`` of every call (inbox consumer name).
        handlers: the registry.
        mode: LIVE or REPLAY (selects the handlers: ``HandlerKind.runs_in``).
        outbox: ``HandlerContext.outbox`` of every call.
        loop: await coroutine handlers there (a shared handler loop); default: an event loop
            of the runner's own, made on first use. One thread uses a runner at a time.
    """

    __slots__ = ("consumer", "handlers", "mode", "outbox", "shared_cursor", "_keys", "_loop",
                 "_runner")

    def __init__(self, *, consumer: str, handlers: HandlerRegistry, mode: ProcessingMode,
                 outbox: OutboxAppender, loop: AwaitLoop | None = None) -> None:
        self.consumer = consumer
        self.handlers = handlers
        self.mode = mode
        self.outbox = outbox
        #: the cursor the handlers called one after the other share
        self.shared_cursor = SharedCursor()
        self._keys: dict[str, tuple[Any, Handlers]] = {}
        self._loop = loop
        self._runner: asyncio.Runner | None = None

    def handlers_for(self, event_type: str) -> Handlers:
        """The handlers of ``event_type`` in this runner's mode, in registration order."""
        return self.handlers.handlers_for(event_type, self.mode)

    def run_key(self, event_type: str) -> tuple[Any, Handlers]:
        """(run key, handlers) of ``event_type``: events with the same non-None key join one
        run; the key is None when a handler is not a batch handler or there is none."""
        found = self._keys.get(event_type)
        if found is None:
            hs = self.handlers_for(event_type)
            key = tuple((h.fn, h.kind) for h in hs) if hs and all(h.batch for h in hs) else None
            found = self._keys[event_type] = (key, hs)
        return found

    def runs(self, items: Iterable[T], event_type: Callable[[T], str]) -> list[tuple[list[T], Handlers, bool]]:
        """Split ``items`` (in order) into ``(items, handlers, batch)`` runs: consecutive items
        whose event types share a run key form one batch run; every other item is a run of its
        own (``batch`` False; ``handlers`` may be empty)."""
        runs: list[tuple[list[T], Handlers, bool]] = []
        last: Any = None
        keys = self._keys
        for it in items:
            t = event_type(it)
            found = keys.get(t) or self.run_key(t)
            key = found[0]
            if key is not None and key == last:
                runs[-1][0].append(it)
            else:
                runs.append(([it], found[1], key is not None))
            last = key
        return runs

    def context(self, conn: Any, position: Position, positions: tuple[Position, ...] | None = None,
                *, shared: bool = True) -> HandlerContext:
        """The context of a call at ``position`` (a run's first) with the run's ``positions``
        (default: ``position`` alone); ``shared`` False: the call gets a cursor of its own
        (calls awaited concurrently)."""
        t, p, o = position
        return HandlerContext(conn=conn, outbox=self.outbox, mode=self.mode, consumer=self.consumer,
                              topic=t, partition=p, offset=o,
                              positions=(position,) if positions is None else positions,
                              shared_cursor=self.shared_cursor if shared else None)

    def call_batch(self, conn: Any, hs: Handlers, positions: Sequence[Position],
                   events: Sequence[Any],
                   failed: Callable[[RegisteredHandler, Position, Exception], Exception] | None = None,
                   ) -> None:
        """Call each batch handler of ``hs`` once with ``events`` (a run; ``positions`` theirs).

        Raises:
            whatever a handler raises, or ``failed(handler, first position, exception)``.
        """
        positions = tuple(positions)
        ctx = self.context(conn, positions[0], positions)
        for h in hs:
            self._invoke(h, ctx, events, positions[0], failed)

    def call_each(self, conn: Any, hs: Handlers, position: Position, event: Any,
                  failed: Callable[[RegisteredHandler, Position, Exception], Exception] | None = None,
                  ) -> None:
        """Call the handlers ``hs`` of one event, one after the other (a batch handler gets a
        one-event list).

        Raises:
            whatever a handler raises, or ``failed(handler, position, exception)``.
        """
        ctx = self.context(conn, position)
        for h in hs:
            self._invoke(h, ctx, (event,) if h.batch else event, position, failed)

    def _invoke(self, h: RegisteredHandler, ctx: HandlerContext, arg: Any, position: Position,
                failed: Callable[[RegisteredHandler, Position, Exception], Exception] | None) -> None:
        try:
            result = h.fn(ctx, arg)
            if result is not None:  # a coroutine handler's call (a plain one returns None)
                self.wait(result)
        except Exception as e:
            if failed is None:
                raise
            raise failed(h, position, e) from e

    async def call_each_async(self, conn: Any, hs: Handlers, position: Position, event: Any) -> None:
        """:meth:`call_each` on the running event loop: coroutine handlers are awaited there,
        so other calls run while this one waits; the call gets a cursor of its own."""
        ctx = self.context(conn, position, shared=False)
        for h in hs:
            result = h.call(ctx, event)
            if inspect.isawaitable(result):
                await result

    def wait(self, result: Any) -> None:
        """Await ``result`` when a handler returned an awaitable (a coroutine handler), on
        the shared loop if one was given, else on this runner's own; anything else is ignored."""
        if inspect.isawaitable(result):
            if self._loop is not None:  # one of the loop's calls, as the fast path's are
                _unknown, failed = self._loop.run_chains([[result]], _awaited)
                if failed:
                    raise failed[0][1]
            else:
                self.run(_awaited(result))

    @property
    def loop(self) -> AwaitLoop | None:
        """The shared handler loop, if the owner gave one."""
        return self._loop

    def run(self, coro: Any) -> Any:
        """Run coroutine ``coro`` to completion on this runner's own event loop."""
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    def close(self) -> None:
        """Close the runner's event loop, if one was made, and drop the shared cursor."""
        self.shared_cursor.clear()
        if self._runner is not None:
            self._runner.close()
            self._runner = None


async def _awaited(awaitable: Any) -> int:
    await awaitable
    return 0


__all__ = ["AwaitLoop", "HandlerRunner", "Position", "verdict"]
