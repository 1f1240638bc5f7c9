"""The event loop a key-parallel consumer awaits its coroutine handlers on.

One thread runs one asyncio loop for every worker thread of the consumer
(``casestream.consumer.keyworkers``), and on it ``calls`` callers: coroutines that take
*chains* (one aggregate's events of a unit, in order) from one FIFO queue and await their
handler calls one event after the other. A worker thread hands the chains of its unit to the
queue (:meth:`HandlerLoop.run_chains`) and blocks until they are done, so at most ``calls``
handler calls wait at once over all units, and a unit whose transaction is claiming or
committing leaves the callers to the units that are calling. With an event loop per worker
thread, each thread's share of the calls sat idle during its unit's database round trips.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Item = TypeVar("Item")


class _Wave:
    """The chains of one :meth:`HandlerLoop.run_chains` call, as the callers work them off."""

    __slots__ = ("pending", "done", "failed", "unknown")

    def __init__(self, pending: int, done: asyncio.Future[None]) -> None:
        self.pending = pending  # chains not finished
        self.done = done
        self.failed: list[tuple[Any, BaseException]] = []
        self.unknown = 0


class HandlerLoop:
    """An asyncio event loop on a daemon thread, with ``calls`` callers of handler chains.

    Args:
        name: thread name (the consumer's name, for thread dumps).
        calls: most handler calls awaited at once (``ConsumerSettings.key_concurrency``).

    Raises:
        ValueError: ``calls`` < 1.
    """

    def __init__(self, name: str, calls: int) -> None:
        if calls < 1:
            raise ValueError(f"handler loop calls must be >= 1, got {calls}")
        self.calls = calls
        self.loop = asyncio.new_event_loop()
        self._closing = False
        self._queue: asyncio.Queue[tuple[_Wave, Sequence[Any], Callable[[Any], Awaitable[int]]]]
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True,
                                        name=f"{name}.handlers")
        self._thread.start()
        started.wait()

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._queue = asyncio.Queue()
        self._callers = [self.loop.create_task(self._caller()) for _ in range(self.calls)]
        started.set()
        self.loop.run_forever()

    async def _caller(self) -> None:
        queue = self._queue
        while True:
            wave, chain, call = await queue.get()
            for item in chain:
                if wave.failed:
                    break  # the first failure stops every chain of its wave
                try:
                    wave.unknown += await call(item)
                except BaseException as e:  # noqa: BLE001 - raised in the unit's thread
                    wave.failed.append((item, e))
                    if self._closing and isinstance(e, asyncio.CancelledError):
                        raise
                    break
            wave.pending -= 1
            if not wave.pending:
                wave.done.set_result(None)

    async def _wave(self, chains: Sequence[Sequence[Any]],
                    call: Callable[[Any], Awaitable[int]]) -> _Wave:
        wave = _Wave(len(chains), self.loop.create_future())
        for chain in chains:
            self._queue.put_nowait((wave, chain, call))
        if chains:
            await wave.done
        return wave

    def run_chains(self, chains: Sequence[Sequence[Item]],
                   call: Callable[[Item], Awaitable[int]]) -> tuple[int, list[tuple[Item, BaseException]]]:
        """Await ``call(item)`` for every item of ``chains``, each chain's items one after the
        other, the chains by the loop's callers (after the chains queued before them); blocks
        the calling thread until every chain has ended.

        The first failure stops every chain of this call before its next item; calls under
        way end first.

        Returns:
            (sum of what the calls returned, [(item, exception)] of the failure, if any).

        Raises:
            RuntimeError: the loop is closed.
        """
        wave = self.run(self._wave(chains, call))
        return wave.unknown, wave.failed

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop (outside the callers) and return its result; blocks the
        calling thread.

        Raises:
            what ``coro`` raised; RuntimeError if the loop is closed.
        """
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("handler loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread (call it once the worker threads have stopped)."""
        if self.loop.is_closed():
            return
        self._closing = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            for task in self._callers:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*self._callers, return_exceptions=True))
            self.loop.close()


__all__ = ["HandlerLoop"]
