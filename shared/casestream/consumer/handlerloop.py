"""The event loop a key-parallel consumer awaits its coroutine handlers on.

One thread runs one asyncio loop for every worker thread of the consumer
(``casestream.consumer.keyworkers``). A worker thread hands the calls of its unit to it
(:meth:`HandlerLoop.run`) and blocks until they are done; the handler calls of all units share
``calls`` slots (:attr:`HandlerLoop.slots`), so a unit whose transaction is committing or
claiming leaves its slots to the units that are calling. With an event loop per worker
thread, each thread's share of the slots sat idle during its unit's database round trips.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class HandlerLoop:
    """An asyncio event loop on a daemon thread, with ``calls`` handler slots.

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
        #: acquired around each event's handler calls, by every unit awaited here
        self.slots = asyncio.Semaphore(calls)
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"{name}.handlers")
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop and return its result; blocks the calling thread.

        Raises:
            what ``coro`` raised; RuntimeError if the loop is closed.
        """
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("handler loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread (after the calls under way have been awaited by their
        callers: call it once the worker threads have stopped)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


__all__ = ["HandlerLoop"]
