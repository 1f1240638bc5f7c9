"""Settings of the notification service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``,
including ``CASESTREAM_SMTP_HOST`` / ``CASESTREAM_SMTP_PORT``, default 127.0.0.1:12525);
notification-specific ones use the prefix ``CASESTREAM_NOTIFICATION_``:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_settings_tables.py)

    CASESTREAM_NOTIFICATION_DATABASE              database name on CASESTREAM_PG_URL (default notification)
    CASESTREAM_NOTIFICATION_HOST                  HTTP listen address (default 127.0.0.1)
    CASESTREAM_NOTIFICATION_MAX_IN_FLIGHT         HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_NOTIFICATION_RATE_TENANT_PER_S     per-tenant token bucket, requests per second (default 400)
    CASESTREAM_NOTIFICATION_RATE_TENANT_BURST     per-tenant token bucket size (default 800)
    CASESTREAM_NOTIFICATION_RATE_CLIENT_PER_S     per-client token bucket, requests per second (default 100)
    CASESTREAM_NOTIFICATION_RATE_CLIENT_BURST     per-client token bucket size (default 200)
    CASESTREAM_NOTIFICATION_REQUEST_DEADLINE_S    budget of a request's database calls, seconds (default 5)
    CASESTREAM_NOTIFICATION_POOL_SIZE             PostgreSQL pool size (most connections) (default 4)
    CASESTREAM_NOTIFICATION_POOL_MIN              connections the pool keeps open (default 2)
    CASESTREAM_NOTIFICATION_POOL_TIMEOUT_S        wait for a pooled connection, seconds (default 30)
    CASESTREAM_NOTIFICATION_CONSUMER_BATCH_SIZE   events per consumer transaction (default 200)
    CASESTREAM_NOTIFICATION_AUTH                  bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_NOTIFICATION_PORT                  HTTP listen port (default 18105)
    CASESTREAM_NOTIFICATION_SMTP_TIMEOUT_S        socket timeout per SMTP operation, seconds (default 10)
    CASESTREAM_NOTIFICATION_SEND_MAX_ATTEMPTS     SMTP attempts before NoticeFailed (default 5)
    CASESTREAM_NOTIFICATION_SEND_FIRST_BACKOFF_S  wait after the first failure, doubling, seconds (default 1)
    CASESTREAM_NOTIFICATION_SEND_MAX_BACKOFF_S    cap of that wait, seconds (default 30)
    CASESTREAM_NOTIFICATION_SENDER_INTERVAL_S     sender poll period without a wake-up, seconds (default 1)

    .. end settings-table

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
