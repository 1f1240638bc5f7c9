"""Use case: record a ``NoticeRequested``, ``CorrectionNoticeRequested`` or
``AppealRejectionNoticeRequested`` (the consumer handler's whole job; no SMTP here).

The notice is stored as PENDING in the caller's transaction — the same transaction as the
consumer runtime's inbox row — so a request is recorded exactly once even if the process
dies; the sender worker does the sending. One notice per case and kind
(:data:`REQUEST_KINDS`: a case has at most one violation notice, one correction notice and
one appeal-rejection mail):

- first request: recorded PENDING (``next_attempt_at`` = now);
- a later request for a case whose notice is still PENDING: re-addressed to the asking
  saga (the sender will answer it), nothing sent twice;
- a later request for a case whose notice is final (SENT/FAILED): the same outcome is
  announced again to the asking saga with the next aggregate version — never a second mail.

An ``EvidenceOverdue`` (case event, v2: carries ``recipient_email``) is recorded as a PENDING
evidence reminder, one per case and evidence request (:func:`record_reminder`); no saga waits
for it, so a redelivered or repeated EvidenceOverdue of the same request records and
announces nothing. An EvidenceOverdue without an address (every v1 event, upcast with
``recipient_email`` None) cannot be mailed: it is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from casestream.events import Envelope
from services.notification.application.events import announce, reply_for
from services.notification.application.ports import EventSink, NoticeStore
from services.notification.domain.notice import Notice, NoticeKind, NoticeStatus, message_id_for

log = logging.getLogger(__name__)


REQUEST_KINDS = {"NoticeRequested": NoticeKind.NOTICE,
                 "CorrectionNoticeRequested": NoticeKind.CORRECTION,
                 "AppealRejectionNoticeRequested": NoticeKind.APPEAL_REJECTION}
"""Request event type -> the kind of notice it asks for."""


def notice_from(request: Envelope, *, now: datetime) -> Notice:
    """A PENDING notice from a request envelope (:data:`REQUEST_KINDS`; saga id = its
    aggregate id). A correction carries the corrected penalty and its reason; an appeal
    rejection its reason (penalty 0).

    Raises:
        KeyError / ValueError: unknown request type, or a payload field is missing or malformed.
    """
    p = request.payload
    case_id = str(p["case_id"])
    kind = REQUEST_KINDS[request.event_type]
    return Notice(case_id=case_id, saga_id=request.aggregate_id, tenant_id=request.tenant_id,
                  correlation_id=request.correlation_id, request_event_id=request.event_id,
                  recipient_email=str(p["recipient_email"]),
                  penalty_cents=int(p.get("penalty_cents") or 0),
                  violation_code=str(p["violation_code"]) if kind is NoticeKind.NOTICE else "",
                  message_id=message_id_for(case_id, kind), status=NoticeStatus.PENDING,
                  attempts=0, next_attempt_at=now, created_at=now,
                  traceparent=request.traceparent, kind=kind,
                  reason=None if kind is NoticeKind.NOTICE else str(p["reason"]))


def record_request(store: NoticeStore, sink: EventSink, request: Envelope, *,
                   clock: Callable[[], datetime]) -> Notice:
    """Record ``request`` (see the module docstring); return the stored notice."""
    now = clock()
    notice = notice_from(request, now=now)
    if store.insert(notice):
        return notice
    existing = store.get(notice.case_id, notice.kind)
    assert existing is not None  # insert refused only because a notice exists
    if existing.status is NoticeStatus.PENDING:
        if existing.saga_id != notice.saga_id:
            existing = replace(existing, saga_id=notice.saga_id,
                               request_event_id=request.event_id)
            store.save(existing)
            log.info("notice of case %s still pending; re-addressed to saga %s",
                     existing.case_id, existing.saga_id)
        return existing
    again = replace(existing, saga_id=notice.saga_id, request_event_id=request.event_id,
                    correlation_id=request.correlation_id, traceparent=request.traceparent,
                    version=existing.version + 1)
    store.save(again)
    announce(sink, reply_for(again, reason=None, now=now))
    log.info("notice of case %s already %s; outcome re-announced to saga %s (no new mail)",
             again.case_id, again.status.value, again.saga_id)
    return again


REMINDER = "EvidenceOverdue"
"""The case event that asks for an evidence reminder."""


def reminder_from(overdue: Envelope, *, now: datetime) -> Notice | None:
    """A PENDING evidence reminder from an ``EvidenceOverdue`` envelope (aggregate id = the
    case id), or None when it names no ``recipient_email``. ``reason`` says when the
    evidence was due and when the case goes to manual review (ISO 8601, UTC).

    Raises:
        KeyError / ValueError / TypeError: a payload field is missing or malformed.
    """
    p = overdue.payload
    recipient = p.get("recipient_email")
    if not recipient:
        return None
    case_id = overdue.aggregate_id
    request_id = str(p.get("request_id") or "")
    kind = NoticeKind.EVIDENCE_REMINDER
    return Notice(case_id=case_id, saga_id="", tenant_id=overdue.tenant_id,
                  correlation_id=overdue.correlation_id, request_event_id=overdue.event_id,
                  recipient_email=str(recipient), penalty_cents=0, violation_code="",
                  message_id=message_id_for(case_id, kind, request_id),
                  status=NoticeStatus.PENDING, attempts=0, next_attempt_at=now, created_at=now,
                  traceparent=overdue.traceparent, kind=kind,
                  reason=(f"it was due at {p['due_at'].isoformat()}; without it the case goes "
                          f"to manual review at {p['escalate_at'].isoformat()}"),
                  evidence_request_id=request_id)


def record_reminder(store: NoticeStore, overdue: Envelope, *,
                    clock: Callable[[], datetime]) -> Notice | None:
    """Record the evidence reminder ``overdue`` asks for (module docstring); return the
    stored reminder (the one already recorded for that request, if any), or None when the
    event names no recipient."""
    reminder = reminder_from(overdue, now=clock())
    if reminder is None:
        log.warning("EvidenceOverdue %s of case %s names no recipient_email: no reminder mail",
                    overdue.event_id, overdue.aggregate_id)
        return None
    if store.insert(reminder):
        return reminder
    return store.get(reminder.case_id, reminder.kind, reminder.evidence_request_id)
