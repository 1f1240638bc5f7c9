"""Event sinks: where an application layer hands the events a use case produced.

A use case depends on an ``EventSink`` port (``append(events)``); the adapters are
:class:`OutboxSink` (rows in the outbox table, in the caller's transaction) and
:class:`MemorySink` (a list: unit tests and in-memory adapters). Pure: the connection and
the writer are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from casestream.events.envelope import Envelope

__all__ = ["MemorySink", "OutboxSink"]


class OutboxSink:
    """``outbox`` (an :class:`~casestream.outbox.writer.OutboxWriter`, or a consumer handler's
    ``ctx.outbox``) bound to ``conn``, so the events commit in the caller's transaction."""

    __slots__ = ("conn", "outbox")

    def __init__(self, outbox: Any, conn: Any):
        self.outbox = outbox
        self.conn = conn

    def append(self, events: Sequence[Envelope]) -> None:
        """Append ``events`` to the outbox on the bound connection (none: no-op)."""
        if events:
            self.outbox.append(self.conn, list(events))


@dataclass(slots=True)
class MemorySink:
    """Collects appended events in order (``events``)."""

    events: list[Envelope] = field(default_factory=list)

    def append(self, events: Sequence[Envelope]) -> None:
        """Add ``events`` to :attr:`events`."""
        self.events.extend(events)
