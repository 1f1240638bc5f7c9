"""Settings of the audit service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
audit-specific ones use the ``CASESTREAM_AUDIT_`` prefix:

    casestream settings audit    prints them, with defaults (generated from the fields below)

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
