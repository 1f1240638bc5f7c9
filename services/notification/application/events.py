"""The notification service's reply events (aggregate ``notice``; id = the case id for the
violation notice, ``<case id>/<kind>`` for the others: ``aggregate_id_for``)."""

from __future__ import annotations

from datetime import datetime

from casestream.events import Envelope, new_event
from services.notification.domain.notice import Notice, NoticeKind, NoticeStatus, aggregate_id_for

AGGREGATE_TYPE = "notice"
SOURCE = "notification"
ACTOR = "notification-sender"
EVENT_VERSIONS = {"NoticeIssued": 2, "NoticeFailed": 1, "CorrectionNoticeIssued": 1,
                  "AppealRejectionNoticeSent": 1}
"""Versions written (pinned: a newer schema version cannot change what this code writes)."""


SENT_EVENTS = {NoticeKind.NOTICE: "NoticeIssued", NoticeKind.CORRECTION: "CorrectionNoticeIssued",
               NoticeKind.APPEAL_REJECTION: "AppealRejectionNoticeSent"}
"""The event announcing a sent notice, by kind (a failure is ``NoticeFailed`` for every kind)."""


def reply_for(notice: Notice, *, reason: str | None, now: datetime) -> Envelope:
    """``NoticeIssued`` v2 (SENT, with the attached document's SHA-256) or ``NoticeFailed``
    (FAILED) for ``notice`` at its ``version``; a sent CORRECTION is ``CorrectionNoticeIssued``
    (with its document's SHA-256), a sent APPEAL_REJECTION ``AppealRejectionNoticeSent``.

    Raises:
        ValueError: the notice is still PENDING.
    """
    if notice.status is NoticeStatus.SENT:
        event_type = SENT_EVENTS[notice.kind]
        payload = {"case_id": notice.case_id, "saga_id": notice.saga_id,
                   "recipient_email": notice.recipient_email, "message_id": notice.message_id}
        if notice.kind is not NoticeKind.APPEAL_REJECTION:
            payload["document_sha256"] = notice.document_sha256 or ""
    elif notice.status is NoticeStatus.FAILED:
        event_type = "NoticeFailed"
        payload = {"case_id": notice.case_id, "saga_id": notice.saga_id,
                   "reason": reason or notice.last_error or "notice failed"}
    else:
        raise ValueError(f"notice of case {notice.case_id} is still pending")
    return new_event(event_type=event_type, event_version=EVENT_VERSIONS[event_type],
                     aggregate_type=AGGREGATE_TYPE,
                     aggregate_id=aggregate_id_for(notice.case_id, notice.kind),
                     aggregate_version=notice.version,
                     payload=payload, tenant_id=notice.tenant_id, source=SOURCE, actor_id=ACTOR,
                     correlation_id=notice.correlation_id, causation_id=notice.request_event_id,
                     traceparent=notice.traceparent, occurred_at=now)
