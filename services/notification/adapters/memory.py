"""In-memory notice store, mailer and event sink, for unit tests (mirror the real adapters).

``MemoryNoticeStore.claim_due`` does not lock (single thread); ``FakeMailer`` records sent
messages and can be told to fail the next attempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from email.message import EmailMessage

from services.notification.domain.errors import MailError
from services.notification.domain.notice import Notice, NoticeKind, NoticeStatus


@dataclass(slots=True)
class MemoryNoticeStore:
    """Dict-backed :class:`~services.notification.application.ports.NoticeStore`."""

    notices: dict[tuple[str, NoticeKind, str], Notice] = field(default_factory=dict)
    wakeups: int = 0

    def get(self, case_id: str, kind: NoticeKind = NoticeKind.NOTICE,
            evidence_request_id: str = "") -> Notice | None:
        return self.notices.get((case_id, kind, evidence_request_id))

    def insert(self, notice: Notice) -> bool:
        if (notice.case_id, notice.kind, notice.evidence_request_id) in self.notices:
            return False
        self.notices[(notice.case_id, notice.kind, notice.evidence_request_id)] = notice
        self.wakeups += 1
        return True

    def claim_due(self, now: datetime) -> Notice | None:
        due = [n for n in self.notices.values()
               if n.status is NoticeStatus.PENDING and n.next_attempt_at <= now]
        due.sort(key=lambda n: (n.next_attempt_at, n.case_id))
        return due[0] if due else None

    def save(self, notice: Notice) -> None:
        assert (notice.case_id, notice.kind, notice.evidence_request_id) in self.notices
        self.notices[(notice.case_id, notice.kind, notice.evidence_request_id)] = notice


@dataclass(slots=True)
class FakeMailer:
    """Records messages; ``failures`` are raised (in order) before anything is sent."""

    sent: list[EmailMessage] = field(default_factory=list)
    failures: list[MailError] = field(default_factory=list)
    attempts: int = 0

    def send(self, message: EmailMessage) -> None:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(message)

