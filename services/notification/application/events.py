"""The notification service's events (aggregate ``notice``; id = the case id for the
violation notice, ``<case id>/<kind>`` for the others, ``<case id>/evidence_reminder/<request
id>`` for a reminder: ``aggregate_id_for``)."""

from __future__ import annotations

from datetime import datetime

from casestream.events import Envelope, new_event
from services.notification.application.ports import EventSink
from services.notification.domain.notice import Notice, NoticeKind, NoticeStatus, aggregate_id_for

AGGREGATE_TYPE = "notice"
SOURCE = "notification"
ACTOR = "notification-sender"
EVENT_VERSIONS = {"NoticeIssued": 2, "NoticeFailed": 1, "CorrectionNoticeIssued": 1,
                  "AppealRejectionNoticeSent": 1, "EvidenceReminderSent": 1}
"""Versions written (pinned: a newer schema version cannot change what this code writes)."""


SENT_EVENTS = {NoticeKind.NOTICE: "NoticeIssued", NoticeKind.CORRECTION: "CorrectionNoticeIssued",
               NoticeKind.APPEAL_REJECTION: "AppealRejectionNoticeSent",
               NoticeKind.EVIDENCE_REMINDER: "EvidenceReminderSent"}
"""The event announcing a sent notice, by kind (a failure is ``NoticeFailed`` for the kinds a
saga waits for; a failed evidence reminder announces nothing)."""


def reply_for(notice: Notice, *, reason: str | None, now: datetime) -> Envelope | None:
    """``NoticeIssued`` v2 (SENT, with the attached document's SHA-256) or ``NoticeFailed``
    (FAILED) for ``notice`` at its ``version``; a sent CORRECTION is ``CorrectionNoticeIssued``
    (with its document's SHA-256), a sent APPEAL_REJECTION ``AppealRejectionNoticeSent``, a
    sent EVIDENCE_REMINDER ``EvidenceReminderSent``. None for a FAILED evidence reminder: no
    saga waits for it (a ``NoticeFailed`` would move the case's saga), the FAILED row with its
    ``last_error`` is the record, and the case escalates to manual review regardless.

    Raises:
        ValueError: the notice is still PENDING.
    """
    if notice.status is NoticeStatus.SENT and notice.kind is NoticeKind.EVIDENCE_REMINDER:
        event_type = SENT_EVENTS[notice.kind]
        payload = {"case_id": notice.case_id, "request_id": notice.evidence_request_id,
                   "recipient_email": notice.recipient_email, "message_id": notice.message_id}
    elif notice.status is NoticeStatus.SENT:
        event_type = SENT_EVENTS[notice.kind]
        payload = {"case_id": notice.case_id, "saga_id": notice.saga_id,
                   "recipient_email": notice.recipient_email, "message_id": notice.message_id}
        if notice.kind is not NoticeKind.APPEAL_REJECTION:
            payload["document_sha256"] = notice.document_sha256 or ""
    elif notice.status is NoticeStatus.FAILED and notice.kind is NoticeKind.EVIDENCE_REMINDER:
        return None
    elif notice.status is NoticeStatus.FAILED:
        event_type = "NoticeFailed"
        payload = {"case_id": notice.case_id, "saga_id": notice.saga_id,
                   "reason": reason or notice.last_error or "notice failed"}
    else:
        raise ValueError(f"notice of case {notice.case_id} is still pending")
    return new_event(event_type=event_type, event_version=EVENT_VERSIONS[event_type],
                     aggregate_type=AGGREGATE_TYPE,
                     aggregate_id=aggregate_id_for(notice.case_id, notice.kind,
                                                   notice.evidence_request_id),
                     aggregate_version=notice.version,
                     payload=payload, tenant_id=notice.tenant_id, source=SOURCE, actor_id=ACTOR,
                     correlation_id=notice.correlation_id, causation_id=notice.request_event_id,
                     traceparent=notice.traceparent, occurred_at=now)


def announce(sink: EventSink, event: Envelope | None) -> None:
    """Append ``event`` to the outbox (``sink``), if there is one (:func:`reply_for` gives
    None for a failed evidence reminder)."""
    if event is not None:
        sink.append([event])
