"""Ports the case use cases depend on; adapters implement them (PostgreSQL, in-memory).

A :class:`UnitOfWork` is one database transaction: the case row, the outbox rows and the
idempotency record written through it commit together or not at all. It is a context
manager: leaving the block normally commits, leaving it with an exception rolls back.
When the transaction belongs to someone else (a consumer runtime's batch), the adapter
neither commits nor rolls back and the owner decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Protocol

from casestream.events import Envelope
from casestream.http import IdempotencyStore

from services.case.application.commands import CaseQuery, EvidenceView
from services.case.domain.case import Case


class CaseRepository(Protocol):
    """Stored cases, tenant-scoped."""

    def get(self, tenant_id: str, case_id: str) -> Case | None:
        """Return the case, or None if it does not exist for this tenant."""
        ...

    def add(self, case: Case) -> None:
        """Insert a new case (its ``loaded_version`` is 0)."""
        ...

    def update(self, case: Case) -> None:
        """Save the case's state if its stored version is still ``case.loaded_version``.

        Raises:
            casestream.errors.ConcurrencyError: the stored version differs.
        """
        ...

    def search(self, query: CaseQuery) -> list[Case]:
        """Cases of ``query.tenant_id`` matching its filters, by ``(opened_at, id)``, at most
        ``query.limit``, strictly after ``query.after``."""
        ...


    def evidence_deadlines_due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        """``(tenant_id, case_id)`` of cases awaiting evidence whose due date (no reminder
        yet) or escalation time (reminded) passed at ``now``; at most ``limit``."""
        ...


class EvidenceStore(Protocol):
    """Evidence items (metadata and content) of cases, tenant-scoped."""

    def add(self, item: EvidenceView, content: bytes) -> None:
        """Store an item with its content (in the unit of work's transaction)."""
        ...

    def list(self, tenant_id: str, case_id: str) -> list[EvidenceView]:
        """The case's items, oldest first (metadata only)."""
        ...

    def content(self, tenant_id: str, case_id: str, evidence_id: str) -> bytes | None:
        """The item's content, or None if the case has no such item."""
        ...


class EventOutbox(Protocol):
    """The transactional outbox, as seen from a unit of work."""

    def append(self, events: Sequence[Envelope]) -> None:
        """Add integration events to the outbox in the current transaction."""
        ...


class UnitOfWork(Protocol):
    """One transaction over cases, idempotency records and the outbox."""

    @property
    def cases(self) -> CaseRepository: ...

    @property
    def idempotency(self) -> IdempotencyStore: ...

    @property
    def evidence(self) -> EvidenceStore: ...

    @property
    def outbox(self) -> EventOutbox: ...

    def __enter__(self) -> UnitOfWork: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]
"""Opens a new unit of work (a new transaction) each call."""


class Clock(Protocol):
    """Source of the current time."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware UTC."""
        ...


IdFactory = Callable[[], str]
"""Returns a new unique id (UUID text form)."""
