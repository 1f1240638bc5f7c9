"""Ports of the saga-orchestrator: what the use cases need from the outside world.

Adapters: :class:`services.saga.adapters.postgres.PgSagaStore` (PostgreSQL, inside the
caller's transaction) and :class:`services.saga.adapters.memory.MemorySagaStore` (unit
tests); the event sink is the consumer runtime's outbox appender bound to a connection.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from casestream.events import Envelope
from services.saga.domain.engine import HistoryEntry, SagaInstance


class SagaStore(Protocol):
    """Durable saga instances and their history, inside one unit of work (transaction).

    ``update`` is the optimistic-concurrency point: it writes only if the stored row is
    still at ``expected_version`` and bumps nothing itself (the caller passes the new
    ``version``).
    """

    def get(self, saga_id: str) -> SagaInstance | None:
        """The saga ``saga_id``, or None."""
        ...

    def newest_for_case(self, case_id: str) -> SagaInstance | None:
        """The most recently started saga of case ``case_id``, or None."""
        ...

    def active_for_case(self, case_id: str) -> SagaInstance | None:
        """The saga of case ``case_id`` that is not in a TERMINAL state, or None."""
        ...

    def insert(self, saga: SagaInstance, *, started_by: str, active: bool) -> bool:
        """Store a new saga (its ``version`` is 1). ``started_by`` = start event id.

        Returns False (and stores nothing) if a saga with that id, or started by that
        event, already exists.
        """
        ...

    def update(self, saga: SagaInstance, *, expected_version: int, active: bool) -> None:
        """Overwrite the stored saga if it is still at ``expected_version``.

        Raises:
            casestream.errors.ConcurrencyError: the row is at another version (or gone).
        """
        ...

    def seen(self, saga_id: str, event_id: str) -> bool:
        """True if event ``event_id`` is already in the saga's history (a duplicate)."""
        ...

    def record(self, saga_id: str, entry: HistoryEntry) -> None:
        """Append ``entry`` to the saga's history."""
        ...

    def claim_due(self, now: datetime, limit: int) -> list[SagaInstance]:
        """Lock and return up to ``limit`` sagas whose ``deadline_at <= now``.

        Locks are held until the unit of work ends; rows locked by another worker are
        skipped (PostgreSQL ``FOR UPDATE SKIP LOCKED``), so several schedulers never fire
        the same deadline twice.
        """
        ...


class EventSink(Protocol):
    """Appends the saga's events to its outbox in the current unit of work."""

    def append(self, events: Sequence[Envelope]) -> None:
        """Append ``events`` in order (no commit)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRecord:
    """A stored history entry, as the query side returns it."""

    seq: int
    entry: HistoryEntry


class SagaQueries(Protocol):
    """Read side for the HTTP API (outside any handler transaction).

    ``tenant_id`` scopes a query to one tenant's sagas (the HTTP API always passes the
    caller's tenant; the filter is applied before any limit); None means every tenant
    (operations tooling only).
    """

    def get(self, saga_id: str) -> SagaInstance | None:
        """The saga ``saga_id``, or None."""
        ...

    def history(self, saga_id: str) -> list[HistoryRecord]:
        """The saga's history, oldest first."""
        ...

    def list(self, *, tenant_id: str | None, state: str | None, case_id: str | None,
             limit: int) -> list[SagaInstance]:
        """Sagas of ``tenant_id``, newest first, optionally only those in ``state`` / of
        ``case_id``; at most ``limit``."""
        ...

    def stuck(self, *, tenant_id: str | None, states: Collection[str], older_than: datetime,
              limit: int) -> list[SagaInstance]:
        """Sagas in one of ``states`` that made no progress: their deadline passed before
        ``older_than`` (the scheduler should have fired it), or — with no deadline — their
        last change is older than ``older_than``. Oldest deadline first, at most ``limit``."""
        ...

    def count_by_state(self, *, tenant_id: str | None) -> dict[str, int]:
        """``{state: number of sagas}`` of ``tenant_id``."""
        ...
