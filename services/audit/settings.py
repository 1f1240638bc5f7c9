"""Settings of the audit service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
audit-specific ones use the ``CASESTREAM_AUDIT_`` prefix:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_settings_tables.py)

    CASESTREAM_AUDIT_DATABASE             database name on CASESTREAM_PG_URL (default audit)
    CASESTREAM_AUDIT_HOST                 HTTP listen address (default 127.0.0.1)
    CASESTREAM_AUDIT_MAX_IN_FLIGHT        HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_AUDIT_RATE_TENANT_PER_S    per-tenant token bucket, requests per second (default 400)
    CASESTREAM_AUDIT_RATE_TENANT_BURST    per-tenant token bucket size (default 800)
    CASESTREAM_AUDIT_RATE_CLIENT_PER_S    per-client token bucket, requests per second (default 100)
    CASESTREAM_AUDIT_RATE_CLIENT_BURST    per-client token bucket size (default 200)
    CASESTREAM_AUDIT_REQUEST_DEADLINE_S   budget of a request's database calls, seconds (default 5)
    CASESTREAM_AUDIT_POOL_SIZE            PostgreSQL pool size (most connections) (default 8)
    CASESTREAM_AUDIT_POOL_MIN             connections the pool keeps open (default 1)
    CASESTREAM_AUDIT_POOL_TIMEOUT_S       wait for a pooled connection, seconds (default 5)
    CASESTREAM_AUDIT_CONSUMER_BATCH_SIZE  events per consumer transaction (default 500)
    CASESTREAM_AUDIT_AUTH                 bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_AUDIT_PORT                 HTTP listen port (default 18102)

    .. end settings-table

Bearer tokens are verified per ``casestream.auth.tokens.AuthSettings`` (``CASESTREAM_AUTH_*``).
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config

_PREFIX = "CASESTREAM_AUDIT_"


class AuditSettings(ServiceSettings):
    """Frozen settings of the audit service (see module docstring for the variables).

    Fields are read only from their prefixed variable (never ``CASESTREAM_PORT`` & co.);
    in code pass the variable names, e.g. ``Settings(CASESTREAM_CASE_PORT=0)``.
    The HTTP edge fields (host, limits, deadline, auth) and ``dsn``: :class:`ServiceSettings`.
    """

    model_config = service_config(_PREFIX)

    database: str = Field("audit", description="database name on CASESTREAM_PG_URL")
    port: int = Field(18102, ge=1, le=65535, description="HTTP listen port")
    pool_size: int = Field(8, ge=2, description="PostgreSQL pool size (most connections)")
    pool_min: int = Field(1, ge=1, description="connections the pool keeps open")
    pool_timeout_s: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds")
    consumer_batch_size: int = Field(500, ge=1, description="events per consumer transaction")
