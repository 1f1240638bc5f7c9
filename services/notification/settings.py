"""Settings of the notification service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``,
including ``CASESTREAM_SMTP_HOST`` / ``CASESTREAM_SMTP_PORT``, default 127.0.0.1:12525);
notification-specific ones use the prefix ``CASESTREAM_NOTIFICATION_``:

    CASESTREAM_NOTIFICATION_HOST / _PORT          HTTP listen address (127.0.0.1:18105)
    CASESTREAM_NOTIFICATION_DATABASE              database name ("notification")
    CASESTREAM_NOTIFICATION_SMTP_TIMEOUT_S        socket timeout per SMTP operation (10)
    CASESTREAM_NOTIFICATION_SEND_MAX_ATTEMPTS     SMTP attempts before NoticeFailed (5)
    CASESTREAM_NOTIFICATION_SEND_FIRST_BACKOFF_S  wait after the first failure, doubling (1)
    CASESTREAM_NOTIFICATION_SEND_MAX_BACKOFF_S    cap of that wait (30)
    CASESTREAM_NOTIFICATION_SENDER_INTERVAL_S     sender poll period without a wake-up (1)
    CASESTREAM_NOTIFICATION_CONSUMER_BATCH        messages per consumer transaction (200)
    CASESTREAM_NOTIFICATION_POOL_SIZE             PostgreSQL connections (4)
    CASESTREAM_NOTIFICATION_MAX_IN_FLIGHT  HTTP requests in flight before shedding with 503 (32)
    CASESTREAM_NOTIFICATION_RATE_TENANT_PER_S / _RATE_TENANT_BURST  per tenant (400/s, 800)
    CASESTREAM_NOTIFICATION_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST  per client (100/s, 200)
    CASESTREAM_NOTIFICATION_REQUEST_DEADLINE_S  budget of a request's database calls, seconds (5)

Bearer tokens are verified per ``casestream.auth.tokens.AuthSettings`` (``CASESTREAM_AUTH_*``).
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config

_P = "CASESTREAM_NOTIFICATION_"


class NotificationSettings(ServiceSettings):
    """Frozen settings of the notification service (see the module docstring).

    The HTTP edge fields (host, limits, deadline, auth) and ``dsn``: :class:`ServiceSettings`.
    """

    model_config = service_config(_P)

    port: int = Field(18105, ge=1, le=65535)
    database: str = "notification"
    smtp_timeout_s: float = Field(10.0, gt=0)
    send_max_attempts: int = Field(5, ge=1)
    send_first_backoff_s: float = Field(1.0, gt=0)
    send_max_backoff_s: float = Field(30.0, gt=0)
    sender_interval_s: float = Field(1.0, gt=0)
    consumer_batch: int = Field(200, ge=1)
    pool_size: int = Field(4, ge=2)
