"""Pure notification domain (stdlib only): the notice, its mail, delivery rules, retries."""

from services.notification.domain.notice import (
    FAIL_DOMAIN,
    Notice,
    NoticeStatus,
    compose,
    message_id_for,
    undeliverable_reason,
)
from services.notification.domain.retry import SendPolicy

__all__ = ["FAIL_DOMAIN", "Notice", "NoticeStatus", "SendPolicy", "compose", "message_id_for",
           "undeliverable_reason"]
