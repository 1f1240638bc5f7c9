"""Ports of the watch application layer (implemented in ``watch.adapters``).

A :class:`WatchRepository` is bound to one transaction: the HTTP adapter opens one per
request (:class:`UnitOfWork`), the consumer hands one over the batch transaction's
connection, so a trigger's watch update and its outbox rows commit with the inbox row.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from casestream.events import Envelope
from casestream.http import IdempotencyStore
from watch.domain import CaseView, Watch


class WatchRepository(Protocol):
    """Cases (the projection, read-only here) and watches, in one transaction; its
    ``idempotency`` store writes Idempotency-Key records in that transaction too."""

    @property
    def idempotency(self) -> IdempotencyStore: ...

    def case(self, tenant_id: str, case_id: str) -> CaseView | None:
        """The projected case, None if unknown (or another tenant's)."""
        ...

    def watches_of(self, tenant_id: str, case_id: str) -> list[Watch]:
        """Every watch of ``case_id`` in ``tenant_id`` (locked until the transaction ends)."""
        ...

    def add_watch(self, watch: Watch) -> tuple[Watch, bool]:
        """Store ``watch`` unless the watcher already watches the case; returns the stored
        watch and whether it was created."""
        ...

    def save_watch(self, watch: Watch) -> None:
        """Store the new ``version`` of an existing watch."""
        ...


class UnitOfWork(Protocol):
    """``with uow() as repo:`` one transaction, committed when the block exits normally."""

    def __call__(self) -> AbstractContextManager[WatchRepository]: ...


class EventSink(Protocol):
    """Appends events in the caller's transaction (``casestream.outbox`` in production)."""

    def append(self, events: Sequence[Envelope]) -> None: ...


class Clock(Protocol):
    """Timezone-aware UTC now."""

    def now(self) -> datetime: ...
