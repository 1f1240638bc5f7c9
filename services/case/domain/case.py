"""The case aggregate: its state, its lifecycle rules, and the events it records.

Lifecycle:

    OPEN --submit--> SUBMITTED --close--> CLOSED     (final)
                               --return-> RETURNED   (final; a returned case is not
                                                      resubmitted in this version)

Each change increments ``version`` by one and records one past-tense event; the
repository saves the state with ``WHERE version = <version it loaded>`` (optimistic
concurrency). Repeating a close or return that already happened identically is a no-op
(no event): the saga may ask twice, the case records it once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from services.case.domain.errors import CaseValidationError, InvalidTransition
from services.case.domain.events import (
    CaseClosed,
    CaseEvent,
    CaseOpened,
    CaseReturned,
    CaseSubmitted,
)
from services.case.domain.values import CaseContent, CaseStatus, Resolution, check_note


class _EventMeta(TypedDict):
    case_id: str
    tenant_id: str
    version: int
    occurred_at: datetime
    actor_id: str


@dataclass(slots=True, kw_only=True)
class Case:
    """A regulatory case owned by one tenant.

    Build a new one with :meth:`open`; rebuild a stored one with the constructor (the
    repository does that, with no pending events). ``loaded_version`` is the version the
    case had when loaded (0 for a new case): the repository's optimistic check.
    """

    id: str
    tenant_id: str
    content: CaseContent
    status: CaseStatus
    version: int
    opened_by: str
    opened_at: datetime
    updated_at: datetime
    submitted_by: str | None = None
    submitted_at: datetime | None = None
    note: str | None = None
    resolution: Resolution | None = None
    resolved_at: datetime | None = None
    loaded_version: int = -1
    _pending: list[CaseEvent] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.loaded_version == -1:
            self.loaded_version = self.version

    # --- commands -------------------------------------------------------------------

    @classmethod
    def open(
        cls, *, case_id: str, tenant_id: str, content: CaseContent, actor_id: str, at: datetime
    ) -> Case:
        """Open a case at version 1, recording :class:`CaseOpened`."""
        if not tenant_id:
            raise CaseValidationError("tenant_id", "must not be empty")
        case = cls(id=case_id, tenant_id=tenant_id, content=content, status=CaseStatus.OPEN,
                   version=0, opened_by=actor_id, opened_at=at, updated_at=at, loaded_version=0)
        case._record(CaseOpened(**case._meta(actor_id, at), content=content))
        return case

    def submit(self, *, actor_id: str, at: datetime, note: str | None = None) -> None:
        """Submit an open case for decision, recording :class:`CaseSubmitted`.

        Raises:
            InvalidTransition: the case is not OPEN.
            CaseValidationError: the note is longer than 1000 characters.
        """
        self._require(CaseStatus.OPEN, "submit")
        note = check_note(note)
        self.status = CaseStatus.SUBMITTED
        self.submitted_by, self.submitted_at, self.note = actor_id, at, note
        self._record(CaseSubmitted(**self._meta(actor_id, at), content=self.content, note=note))

    def close(self, *, outcome: str, penalty_cents: int | None, actor_id: str, at: datetime) -> bool:
        """Close a submitted case with a decision, recording :class:`CaseClosed`.

        Returns:
            True if the case changed, False if it was already closed identically (no event).
        Raises:
            InvalidTransition: the case is OPEN, RETURNED, or CLOSED with another outcome.
            CaseValidationError: bad outcome / penalty combination (see ``Resolution.closed``).
        """
        resolution = Resolution.closed(outcome, penalty_cents)
        if self.status is CaseStatus.CLOSED and self.resolution == resolution:
            return False
        self._require(CaseStatus.SUBMITTED, "close")
        self._resolve(CaseStatus.CLOSED, resolution, at)
        assert resolution.outcome is not None
        self._record(CaseClosed(**self._meta(actor_id, at), outcome=resolution.outcome,
                                penalty_cents=resolution.penalty_cents))
        return True

    def return_(self, *, reason: str, actor_id: str, at: datetime) -> bool:
        """Return a submitted case (compensation), recording :class:`CaseReturned`.

        Returns:
            True if the case changed, False if it was already returned (no event).
        Raises:
            InvalidTransition: the case is OPEN or CLOSED.
            CaseValidationError: empty or over-long reason.
        """
        resolution = Resolution.returned(reason)
        if self.status is CaseStatus.RETURNED:
            return False
        self._require(CaseStatus.SUBMITTED, "return")
        self._resolve(CaseStatus.RETURNED, resolution, at)
        assert resolution.reason is not None
        self._record(CaseReturned(**self._meta(actor_id, at), reason=resolution.reason))
        return True

    # --- events ---------------------------------------------------------------------

    def pull_events(self) -> list[CaseEvent]:
        """Return the events recorded since load/open, oldest first, and forget them."""
        events, self._pending = self._pending, []
        return events

    @property
    def pending_events(self) -> tuple[CaseEvent, ...]:
        """The events recorded and not yet pulled (read-only view)."""
        return tuple(self._pending)

    # --- internals ------------------------------------------------------------------

    def _require(self, status: CaseStatus, action: str) -> None:
        if self.status is not status:
            raise InvalidTransition(self.id, self.status.value, action)

    def _resolve(self, status: CaseStatus, resolution: Resolution, at: datetime) -> None:
        self.status, self.resolution, self.resolved_at = status, resolution, at

    def _meta(self, actor_id: str, at: datetime) -> _EventMeta:
        return {"case_id": self.id, "tenant_id": self.tenant_id, "version": self.version + 1,
                "occurred_at": at, "actor_id": actor_id}

    def _record(self, event: CaseEvent) -> None:
        self.version = event.version
        self.updated_at = event.occurred_at
        self._pending.append(event)
