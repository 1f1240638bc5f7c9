"""Settings of the case service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
case-specific ones use the ``CASESTREAM_CASE_`` prefix:

    CASESTREAM_CASE_DATABASE            database name (default ``case``)
    CASESTREAM_CASE_HOST / _PORT        HTTP listen address (default 127.0.0.1:18101)
    CASESTREAM_CASE_MAX_BODY_BYTES      request body limit, bytes (default 65536) -> 413
    CASESTREAM_CASE_IDEMPOTENCY_TTL_S   how long idempotent responses are replayed (default 86400)
    CASESTREAM_CASE_PURGE_INTERVAL_S    expired idempotency records purge period (default 300)
    CASESTREAM_CASE_POOL_MIN / _MAX     PostgreSQL pool size (default 2 / 10)
    CASESTREAM_CASE_POOL_TIMEOUT_S      wait for a pooled connection, seconds (default 5) -> 503
    CASESTREAM_CASE_RELAY_ENABLED       run the outbox relay in this process (default true;
                                        false when Debezium publishes the outbox)
    CASESTREAM_CASE_CONSUMER_ENABLED    run consumer ``case.saga-requests`` (default true)
    CASESTREAM_CASE_MAX_IN_FLIGHT       HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_CASE_RATE_TENANT_PER_S / _RATE_TENANT_BURST   per-tenant token bucket (400/s, 800)
    CASESTREAM_CASE_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST   per-client token bucket (100/s, 200)
    CASESTREAM_CASE_REQUEST_DEADLINE_S  budget of a request's database calls, seconds (default 5)

Bearer tokens are verified per ``casestream.auth.tokens.AuthSettings`` (``CASESTREAM_AUTH_*``: key,
algorithm, issuer, audience), read when these settings are built.
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config

_PREFIX = "CASESTREAM_CASE_"


class CaseSettings(ServiceSettings):
    """Frozen settings of the case service (see module docstring for the variables).

    Fields are read only from their prefixed variable (never ``CASESTREAM_PORT`` & co.);
    in code pass the variable names, e.g. ``Settings(CASESTREAM_CASE_PORT=0)``.
    The HTTP edge fields (host, limits, deadline, auth) and ``dsn``: :class:`ServiceSettings`.
    """

    model_config = service_config(_PREFIX)

    database: str = "case"
    port: int = Field(18101, ge=1, le=65535)
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    idempotency_ttl_s: float = Field(86_400.0, gt=0)
    purge_interval_s: float = Field(300.0, gt=0)
    pool_min: int = Field(2, ge=1)
    pool_max: int = Field(10, ge=1)
    pool_timeout_s: float = Field(5.0, gt=0)
    relay_enabled: bool = True
    consumer_enabled: bool = True
