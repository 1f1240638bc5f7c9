"""Request deadlines: one absolute deadline per request, shared by every outgoing call.

:class:`DeadlineMiddleware` starts a deadline of ``budget_s`` when a request arrives and
makes it the current deadline (a ``contextvars`` variable, so it follows the request into
starlette's thread pool). Outgoing calls read :func:`current_deadline` and wait at most
:meth:`Deadline.remaining` (``casestream.http.pgdeadline.DeadlinePool`` for PostgreSQL).

A deadline is never extended: :func:`deadline_scope` inside another scope keeps the
earlier of the two, and every call derives its timeout from the same absolute instant,
so retries or later steps of a request only get what is left.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from casestream.errors import CasestreamError


class DeadlineExceeded(CasestreamError):
    """The request's deadline passed before (or while) an outgoing call could be made."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute deadline on the ``time.monotonic()`` clock, seconds."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        """Seconds left (negative once passed)."""
        return self.at - time.monotonic()

    def check(self, what: str) -> float:
        """Return the seconds left; raise :class:`DeadlineExceeded` naming ``what`` if none."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded(f"deadline passed before {what}")
        return left


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "casestream_deadline", default=None)


def current_deadline() -> Deadline | None:
    """The deadline of the request being served in this context, or None."""
    return _current.get()


@contextmanager
def deadline_scope(seconds: float) -> Iterator[Deadline]:
    """Make a deadline ``seconds`` from now current; an earlier enclosing one is kept."""
    outer = _current.get()
    deadline = Deadline.after(seconds)
    if outer is not None and outer.at < deadline.at:
        deadline = outer
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


class DeadlineMiddleware:
    """Give each HTTP request a deadline of ``budget_s`` seconds (see module docstring)."""

    def __init__(self, app: ASGIApp, *, budget_s: float) -> None:
        if budget_s <= 0:
            raise ValueError("budget_s must be > 0")
        self.app = app
        self._budget = budget_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with deadline_scope(self._budget):
            await self.app(scope, receive, send)
