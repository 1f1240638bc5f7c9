"""Waiting for conditions and running workers in threads, for tests of concurrent code."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, *, step_s: float = 0.3,
             describe: Callable[[], Any] | None = None) -> Any:
    """Call ``check`` every ``step_s`` seconds until it returns something truthy, and return
    that; after ``timeout_s`` seconds fail, naming ``what`` and the last value (or what
    ``describe()`` says then)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(step_s)
    if describe is not None:
        last = describe()
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def run_threads(target: Callable[[int], None], count: int, *,
                timeout_s: float | None = None) -> None:
    """Run ``target(0)`` … ``target(count - 1)`` in ``count`` threads at once and join them
    (each for at most ``timeout_s`` seconds; ``None``: until it ends)."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
