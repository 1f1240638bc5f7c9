"""A violation notice: its record, its mail, and which recipients cannot be served.

Rules:
- one notice of each :class:`NoticeKind` per case (case id + kind + evidence request id is the
  notice's identity): the violation notice, a correction notice (an upheld appeal or a
  supervisor's correction), the mail telling the party their appeal was rejected, and one
  evidence reminder per evidence request (the other kinds have evidence request id ``""``);
  a correction never replaces the notice it corrects — both stay on record;
- event aggregate id: the case id for the violation notice, ``<case id>/<kind>`` for the
  others and ``<case id>/evidence_reminder/<request id>`` for a reminder
  (:func:`aggregate_id_for`), so each has its own consecutive aggregate versions;
- the mail's Message-ID is derived from that identity only (:func:`message_id_for`), so a
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


class NoticeKind(enum.Enum):
    """What a notice is; each kind is sent at most once per case."""

    NOTICE = "notice"
    CORRECTION = "correction"
    APPEAL_REJECTION = "appeal_rejection"
    EVIDENCE_REMINDER = "evidence_reminder"


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
        saga_id: the saga to answer (NoticeIssued / NoticeFailed carry it); ``""`` for an
            evidence reminder (no saga waits for it).
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
        kind: see :class:`NoticeKind`.
        reason: why a correction was made / an appeal rejected; for an evidence reminder,
            when the evidence was due and when the case goes to manual review (None for a
            NOTICE).
        evidence_request_id: the evidence request a reminder is for (``""`` for other kinds).
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
    kind: NoticeKind = NoticeKind.NOTICE
    reason: str | None = None
    evidence_request_id: str = ""


def message_id_for(case_id: str, kind: NoticeKind = NoticeKind.NOTICE,
                   evidence_request_id: str = "") -> str:
    """The deterministic Message-ID of the ``kind`` notice of ``case_id``:
    ``<case_id@notice.casestream>`` for the NOTICE, ``<case_id.<kind>@notice.casestream>``
    for the others, ``<case_id.evidence_reminder.<request id>@notice.casestream>`` for the
    reminder of one evidence request."""
    if kind is NoticeKind.NOTICE:
        return f"<{case_id}@{MESSAGE_ID_DOMAIN}>"
    if evidence_request_id:
        return f"<{case_id}.{kind.value}.{evidence_request_id}@{MESSAGE_ID_DOMAIN}>"
    return f"<{case_id}.{kind.value}@{MESSAGE_ID_DOMAIN}>"


def aggregate_id_for(case_id: str, kind: NoticeKind, evidence_request_id: str = "") -> str:
    """The event aggregate id of the ``kind`` notice of ``case_id`` (module docstring)."""
    if kind is NoticeKind.NOTICE:
        return case_id
    if evidence_request_id:
        return f"{case_id}/{kind.value}/{evidence_request_id}"
    return f"{case_id}/{kind.value}"


def has_document(notice: Notice) -> bool:
    """True if the notice's mail carries a PDF (the violation and the correction notice;
    the appeal-rejection mail and the evidence reminder are text only)."""
    return notice.kind in (NoticeKind.NOTICE, NoticeKind.CORRECTION)


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
    """File name of the notice's PDF attachment: ``notice-<case id>.pdf`` (a correction:
    ``correction-<case id>.pdf``)."""
    prefix = "correction" if notice.kind is NoticeKind.CORRECTION else "notice"
    return f"{prefix}-{notice.case_id}.pdf"


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
    msg["Subject"] = subject_of(notice)
    msg["Message-ID"] = notice.message_id
    msg["Date"] = format_datetime(date)
    msg["X-Casestream-Case-Id"] = notice.case_id
    if notice.saga_id:
        msg["X-Casestream-Saga-Id"] = notice.saga_id
    msg["X-Casestream-Notice-Kind"] = notice.kind.value
    msg.set_content(body_of(notice))
    if document is not None:
        msg.add_attachment(document, maintype="application", subtype="pdf",
                           filename=document_name(notice))
    return msg


def subject_of(notice: Notice) -> str:
    """The mail's Subject, by kind."""
    if notice.kind is NoticeKind.CORRECTION:
        return f"Correction notice for case {notice.case_id}"
    if notice.kind is NoticeKind.APPEAL_REJECTION:
        return f"Your appeal of case {notice.case_id} was rejected"
    if notice.kind is NoticeKind.EVIDENCE_REMINDER:
        return f"Reminder: evidence for case {notice.case_id} is overdue"
    return f"Notice of violation {notice.violation_code} for case {notice.case_id}"


def body_of(notice: Notice) -> str:
    """The mail's text, by kind."""
    if notice.kind is NoticeKind.CORRECTION:
        return (f"The notice sent for case {notice.case_id} "
                f"({message_id_for(notice.case_id)}) is corrected: {notice.reason}.\n"
                f"Corrected penalty: {penalty_text(notice.penalty_cents)}.\n"
                "The original notice stays on record; this correction is attached.\n")
    if notice.kind is NoticeKind.APPEAL_REJECTION:
        return (f"Your appeal of case {notice.case_id} was rejected: {notice.reason}.\n"
                f"The notice {message_id_for(notice.case_id)} stands.\n")
    if notice.kind is NoticeKind.EVIDENCE_REMINDER:
        return (f"The evidence requested for case {notice.case_id} has not arrived: "
                f"{notice.reason}.\nPlease submit it; this reminder is sent once.\n")
    return (f"Case {notice.case_id} was found in violation of {notice.violation_code}.\n"
            f"Penalty: {penalty_text(notice.penalty_cents)}.\n"
            "This notice is sent once; its Message-ID identifies it.\n")
