"""Ports of the decision service (adapters: ``adapters.postgres``, ``adapters.memory``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from casestream.events import Envelope
from services.decision.domain.decision import Decision


class DecisionStore(Protocol):
    """Decisions, one per case, inside the caller's unit of work."""

    def get(self, case_id: str) -> Decision | None:
        """The decision of ``case_id``, or None."""
        ...

    def insert(self, decision: Decision) -> bool:
        """Store a first decision; False (nothing stored) if the case already has one."""
        ...

    def readdress(self, case_id: str, *, saga_id: str, expected_version: int,
                  step: int = 1) -> None:
        """Point the decision at ``saga_id`` and bump its version to
        ``expected_version + step`` (one version per event re-announced).

        Raises:
            casestream.errors.ConcurrencyError: the stored version is not ``expected_version``.
        """
        ...


class EventSink(Protocol):
    """Appends events to the service's outbox in the current unit of work."""

    def append(self, events: Sequence[Envelope]) -> None:
        """Append ``events`` in order (no commit)."""
        ...
