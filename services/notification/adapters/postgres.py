"""PostgreSQL notice store (table ``notice`` of ``migrations/*.sql``), psycopg 3.

Works on the caller's connection inside the caller's transaction (never commits).
:meth:`PgNoticeStore.insert` also issues ``NOTIFY notification_pending`` (delivered at
commit) so the sender worker wakes at once instead of waiting for its next poll.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.notification.domain.notice import Notice, NoticeKind, NoticeStatus

WAKE_CHANNEL = "notification_pending"
"""LISTEN/NOTIFY channel that wakes the sender when a notice is recorded."""

_COLUMNS = ("case_id, saga_id, tenant_id, correlation_id, request_event_id, traceparent, "
            "recipient_email, penalty_cents, violation_code, message_id, status, attempts, "
            "next_attempt_at, last_error, version, created_at, document_sha256, kind, reason, "
            "evidence_request_id")


def notice_from_row(row: tuple[Any, ...]) -> Notice:
    """A :class:`Notice` from a row of ``SELECT {_COLUMNS}``."""
    (case_id, saga_id, tenant_id, correlation_id, request_event_id, traceparent, recipient,
     penalty, code, message_id, status, attempts, next_attempt_at, last_error, version,
     created_at, document_sha256, kind, reason, evidence_request_id) = row
    return Notice(case_id=case_id, saga_id=saga_id, tenant_id=tenant_id,
                  correlation_id=correlation_id, request_event_id=request_event_id,
                  traceparent=traceparent, recipient_email=recipient, penalty_cents=penalty,
                  violation_code=code, message_id=message_id, status=NoticeStatus(status),
                  attempts=attempts, next_attempt_at=next_attempt_at, last_error=last_error,
                  version=version, created_at=created_at, document_sha256=document_sha256,
                  kind=NoticeKind(kind), reason=reason, evidence_request_id=evidence_request_id)


class PgNoticeStore:
    """:class:`~services.notification.application.ports.NoticeStore` on one psycopg connection."""

    def __init__(self, conn: Any):
        self.conn = conn

    def get(self, case_id: str, kind: NoticeKind = NoticeKind.NOTICE,
            evidence_request_id: str = "") -> Notice | None:
        row = self.conn.execute(
            f"""SELECT {_COLUMNS} FROM notice
                WHERE case_id = %s AND kind = %s AND evidence_request_id = %s""",
            (case_id, kind.value, evidence_request_id)).fetchone()
        return None if row is None else notice_from_row(row)

    def insert(self, notice: Notice) -> bool:
        row = self.conn.execute(
            f"""INSERT INTO notice ({_COLUMNS})
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                        %s)
                ON CONFLICT DO NOTHING RETURNING 1""",
            (notice.case_id, notice.saga_id, notice.tenant_id, notice.correlation_id,
             notice.request_event_id, notice.traceparent, notice.recipient_email,
             notice.penalty_cents, notice.violation_code, notice.message_id,
             notice.status.value, notice.attempts, notice.next_attempt_at, notice.last_error,
             notice.version, notice.created_at, notice.document_sha256, notice.kind.value,
             notice.reason, notice.evidence_request_id),
        ).fetchone()
        if row is None:
            return False
        self.conn.execute("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, notice.case_id))
        return True

    def claim_due(self, now: datetime) -> Notice | None:
        row = self.conn.execute(
            f"""SELECT {_COLUMNS} FROM notice
                WHERE status = 'pending' AND next_attempt_at <= %s
                ORDER BY next_attempt_at, case_id LIMIT 1 FOR UPDATE SKIP LOCKED""",
            (now,)).fetchone()
        return None if row is None else notice_from_row(row)

    def save(self, notice: Notice) -> None:
        self.conn.execute(
            """UPDATE notice SET saga_id = %s, request_event_id = %s, correlation_id = %s,
                                 traceparent = %s, status = %s, attempts = %s,
                                 next_attempt_at = %s, last_error = %s, version = %s,
                                 document_sha256 = %s, updated_at = now(),
                                 sent_at = CASE WHEN %s = 'sent' THEN coalesce(sent_at, now())
                                                ELSE sent_at END
               WHERE case_id = %s AND kind = %s AND evidence_request_id = %s""",
            (notice.saga_id, notice.request_event_id, notice.correlation_id, notice.traceparent,
             notice.status.value, notice.attempts, notice.next_attempt_at, notice.last_error,
             notice.version, notice.document_sha256, notice.status.value, notice.case_id,
             notice.kind.value, notice.evidence_request_id))


class PgNoticeQueries:
    """Read side for ``GET /notices/{case_id}`` and ``GET /notices?status=``."""

    def __init__(self, pool: Any):
        self.pool = pool

    def get(self, case_id: str, kind: NoticeKind = NoticeKind.NOTICE) -> Notice | None:
        with self.pool.connection() as conn:
            return PgNoticeStore(conn).get(case_id, kind)

    def list(self, *, tenant_id: str, status: str | None, limit: int) -> list[Notice]:
        """Notices of ``tenant_id`` (filtered before the limit), newest first."""
        where, params = "WHERE tenant_id = %s", [tenant_id]
        if status:
            where, params = where + " AND status = %s", [*params, status]
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM notice {where} ORDER BY created_at DESC LIMIT %s",
                (*params, limit)).fetchall()
        return [notice_from_row(r) for r in rows]
