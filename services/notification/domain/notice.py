"""A violation notice: its record, its mail, and which recipients cannot be served.

Rules:
- one notice per case (the case id is the notice's identity and its event aggregate id);
- the mail's Message-ID is derived from the case id only (:func:`message_id_for`), so a
  re-send after a crash carries the same Message-ID (RFC 5322 §3.6.4: a retransmission of
  the same message keeps its identifier) and a receiving system can drop the duplicate;
- a recipient whose address ends with ``@fail.invalid`` cannot be served (RFC 2606 reserves
  ``.invalid``; this exact domain is the documented test hook): the notice fails at once,
  without an SMTP attempt.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime

FAIL_DOMAIN = "fail.invalid"
"""Recipients at this domain make the notice fail (documented test hook)."""

MESSAGE_ID_DOMAIN = "notice.casestream"
SENDER = "Casestream Notices <notices@casestream.example>"


class NoticeStatus(enum.Enum):
    """Lifecycle of a notice: PENDING -> SENT | FAILED (final)."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """One case's notice, as stored.

    Attributes:
        case_id: the case (unique).
        saga_id: the saga to answer (NoticeIssued / NoticeFailed carry it).
        tenant_id, correlation_id, traceparent: copied from the request for the reply.
        request_event_id: the NoticeRequested event (causation of the reply).
        recipient_email, penalty_cents, violation_code: the notice's content.
        message_id: the mail's Message-ID, ``<case-id@notice.casestream>``.
        status: see :class:`NoticeStatus`.
        attempts: SMTP attempts made so far.
        next_attempt_at: when the sender may try (again).
        last_error: the last SMTP error, if any.
        version: aggregate version of the last event emitted for this notice (0 = none).
        created_at: when the request was recorded.
    """

    case_id: str
    saga_id: str
    tenant_id: str
    correlation_id: str
    request_event_id: str
    recipient_email: str
    penalty_cents: int
    violation_code: str
    message_id: str
    status: NoticeStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    last_error: str | None = None
    traceparent: str | None = None
    version: int = 0


def message_id_for(case_id: str) -> str:
    """The deterministic Message-ID of the notice of ``case_id``: ``<case_id@notice.casestream>``."""
    return f"<{case_id}@{MESSAGE_ID_DOMAIN}>"


def undeliverable_reason(recipient_email: str) -> str | None:
    """Why a notice to ``recipient_email`` can never be delivered, or None if it can be tried."""
    if "@" not in recipient_email:
        return f"recipient {recipient_email!r} is not an e-mail address"
    if recipient_email.lower().endswith("@" + FAIL_DOMAIN):
        return f"recipient {recipient_email} is undeliverable (reserved domain {FAIL_DOMAIN})"
    return None


def compose(notice: Notice, *, date: datetime) -> EmailMessage:
    """The notice mail: plain text, deterministic Message-ID, case headers.

    Args:
        date: the Date header (the time of the attempt, timezone-aware).
    """
    msg = EmailMessage()
    msg["From"] = SENDER
    msg["To"] = notice.recipient_email
    msg["Subject"] = f"Notice of violation {notice.violation_code} for case {notice.case_id}"
    msg["Message-ID"] = notice.message_id
    msg["Date"] = format_datetime(date)
    msg["X-Casestream-Case-Id"] = notice.case_id
    msg["X-Casestream-Saga-Id"] = notice.saga_id
    euros, cents = divmod(notice.penalty_cents, 100)
    msg.set_content(
        f"Case {notice.case_id} was found in violation of {notice.violation_code}.\n"
        f"Penalty: EUR {euros:,}.{cents:02d} ({notice.penalty_cents} cents).\n"
        "This notice is sent once; its Message-ID identifies it.\n"
    )
    return msg
