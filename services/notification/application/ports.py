"""Ports of the notification service (adapters: ``adapters.postgres``, ``adapters.smtp``,
``adapters.memory``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from email.message import EmailMessage
from typing import Protocol

from casestream.events import Envelope
from services.notification.domain.notice import Notice, NoticeKind


class NoticeStore(Protocol):
    """Notices, one per case and kind, inside the caller's unit of work (transaction)."""

    def get(self, case_id: str, kind: NoticeKind = NoticeKind.NOTICE,
            evidence_request_id: str = "") -> Notice | None:
        """The ``kind`` notice of ``case_id`` (of that evidence request for a reminder), or None."""
        ...

    def insert(self, notice: Notice) -> bool:
        """Record a new notice; False (nothing stored) if the case already has one of its kind.

        Also wakes the sender once the unit of work commits (PostgreSQL: NOTIFY).
        """
        ...

    def claim_due(self, now: datetime) -> Notice | None:
        """Lock and return the oldest PENDING notice with ``next_attempt_at <= now``, or None.

        The lock is held until the unit of work ends; notices locked by another sender are
        skipped (``FOR UPDATE SKIP LOCKED``).
        """
        ...

    def save(self, notice: Notice) -> None:
        """Overwrite the stored notice (status, attempts, next attempt, error, saga, version)."""
        ...


NoticeDocument = Callable[[Notice], bytes]
"""Renders a notice's document (PDF bytes), deterministically (same notice, same bytes)."""


class Mailer(Protocol):
    """Sends one mail."""

    def send(self, message: EmailMessage) -> None:
        """Send ``message`` to its ``To`` recipient.

        Raises:
            services.notification.domain.errors.MailError: the attempt failed (permanent or not).
        """
        ...


class EventSink(Protocol):
    """Appends events to the service's outbox in the current unit of work."""

    def append(self, events: Sequence[Envelope]) -> None:
        """Append ``events`` in order (no commit)."""
        ...
