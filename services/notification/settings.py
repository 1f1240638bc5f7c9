"""Settings of the notification service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``,
including ``CASESTREAM_SMTP_HOST`` / ``CASESTREAM_SMTP_PORT``, default 127.0.0.1:12525);
notification-specific ones use the prefix ``CASESTREAM_NOTIFICATION_``:

    casestream settings notification    prints them, with defaults (generated from the fields below)

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

    port: int = Field(18105, ge=1, le=65535, description="HTTP listen port")
    database: str = Field("notification", description="database name on CASESTREAM_PG_URL")
    smtp_timeout_s: float = Field(10.0, gt=0, description="socket timeout per SMTP operation, seconds")
    send_max_attempts: int = Field(5, ge=1, description="SMTP attempts before NoticeFailed")
    send_first_backoff_s: float = Field(1.0, gt=0, description="wait after the first failure, doubling, seconds")
    send_max_backoff_s: float = Field(30.0, gt=0, description="cap of that wait, seconds")
    sender_interval_s: float = Field(1.0, gt=0, description="sender poll period without a wake-up, seconds")
    pool_size: int = Field(4, ge=2, description="PostgreSQL pool size (most connections)")
