"""Settings of the audit service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
audit-specific ones use the ``CASESTREAM_AUDIT_`` prefix:

    CASESTREAM_AUDIT_DATABASE           database name (default ``audit``)
    CASESTREAM_AUDIT_HOST / _PORT       HTTP listen address (default 127.0.0.1:18102)
    CASESTREAM_AUDIT_POOL_MIN / _MAX    PostgreSQL pool size for reads (default 1 / 8)
    CASESTREAM_AUDIT_POOL_TIMEOUT_S     wait for a pooled connection, seconds (default 5)
    CASESTREAM_AUDIT_BATCH_SIZE         events per consumer transaction (default 500)
    CASESTREAM_AUDIT_MAX_IN_FLIGHT      HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_AUDIT_RATE_TENANT_PER_S / _RATE_TENANT_BURST  per-tenant token bucket (400/s, 800)
    CASESTREAM_AUDIT_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST  per-client token bucket (100/s, 200)
    CASESTREAM_AUDIT_REQUEST_DEADLINE_S budget of a request's database calls, seconds (default 5)

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

    database: str = "audit"
    port: int = Field(18102, ge=1, le=65535)
    pool_min: int = Field(1, ge=1)
    pool_max: int = Field(8, ge=1)
    pool_timeout_s: float = Field(5.0, gt=0)
    batch_size: int = Field(500, ge=1)
