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
        document_sha256: SHA-256 (hex) of the PDF attached when it was sent, if any.
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
    document_sha256: str | None = None


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


def penalty_text(penalty_cents: int) -> str:
    """``EUR 1,250.00 (125000 cents)``."""
    euros, cents = divmod(penalty_cents, 100)
    return f"EUR {euros:,}.{cents:02d} ({penalty_cents} cents)"


def document_name(notice: Notice) -> str:
    """File name of the notice's PDF attachment: ``notice-<case id>.pdf``."""
    return f"notice-{notice.case_id}.pdf"


def compose(notice: Notice, *, date: datetime, document: bytes | None = None) -> EmailMessage:
    """The notice mail: plain text, deterministic Message-ID, case headers, and the notice
    document attached as ``application/pdf`` when given.

    Args:
        date: the Date header (the time of the attempt, timezone-aware).
        document: the PDF (bytes) to attach, named :func:`document_name`.
    """
    msg = EmailMessage()
    msg["From"] = SENDER
    msg["To"] = notice.recipient_email
    msg["Subject"] = f"Notice of violation {notice.violation_code} for case {notice.case_id}"
    msg["Message-ID"] = notice.message_id
    msg["Date"] = format_datetime(date)
    msg["X-Casestream-Case-Id"] = notice.case_id
    msg["X-Casestream-Saga-Id"] = notice.saga_id
    msg.set_content(
        f"Case {notice.case_id} was found in violation of {notice.violation_code}.\n"
        f"Penalty: {penalty_text(notice.penalty_cents)}.\n"
        "This notice is sent once; its Message-ID identifies it.\n"
    )
    if document is not None:
        msg.add_attachment(document, maintype="application", subtype="pdf",
                           filename=document_name(notice))
    return msg
