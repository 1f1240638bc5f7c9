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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from casestream.events import Envelope
from services.notification.application.events import reply_for
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
    sink.append([reply_for(again, reason=None, now=now)])
    log.info("notice of case %s already %s; outcome re-announced to saga %s (no new mail)",
             again.case_id, again.status.value, again.saga_id)
    return again
