"""Pure notification domain (stdlib only): the notice, its mail, delivery rules."""

from services.notification.domain.notice import (
    FAIL_DOMAIN,
    Notice,
    NoticeKind,
    NoticeStatus,
    aggregate_id_for,
    compose,
    message_id_for,
    undeliverable_reason,
)

__all__ = ["FAIL_DOMAIN", "Notice", "NoticeKind", "NoticeStatus", "aggregate_id_for", "compose", "message_id_for",
           "undeliverable_reason"]
