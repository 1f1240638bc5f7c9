"""Settings of the case service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
case-specific ones use the ``CASESTREAM_CASE_`` prefix:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_settings_tables.py)

    CASESTREAM_CASE_DATABASE             database name on CASESTREAM_PG_URL (default case)
    CASESTREAM_CASE_HOST                 HTTP listen address (default 127.0.0.1)
    CASESTREAM_CASE_MAX_IN_FLIGHT        HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_CASE_RATE_TENANT_PER_S    per-tenant token bucket, requests per second (default 400)
    CASESTREAM_CASE_RATE_TENANT_BURST    per-tenant token bucket size (default 800)
    CASESTREAM_CASE_RATE_CLIENT_PER_S    per-client token bucket, requests per second (default 100)
    CASESTREAM_CASE_RATE_CLIENT_BURST    per-client token bucket size (default 200)
    CASESTREAM_CASE_REQUEST_DEADLINE_S   budget of a request's database calls, seconds (default 5)
    CASESTREAM_CASE_POOL_SIZE            PostgreSQL pool size (most connections) (default 10)
    CASESTREAM_CASE_POOL_MIN             connections the pool keeps open (default 2)
    CASESTREAM_CASE_POOL_TIMEOUT_S       wait for a pooled connection, seconds (then 503) (default 5)
    CASESTREAM_CASE_CONSUMER_BATCH_SIZE  events per consumer transaction (default 500)
    CASESTREAM_CASE_AUTH                 bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_CASE_PORT                 HTTP listen port (default 18101)
    CASESTREAM_CASE_MAX_BODY_BYTES       request body limit, bytes (larger: 413) (default 65536)
    CASESTREAM_CASE_IDEMPOTENCY_TTL_S    how long idempotent responses are replayed, seconds (default 86400)
    CASESTREAM_CASE_PURGE_INTERVAL_S     expired idempotency records purge period, seconds (default 300)
    CASESTREAM_CASE_RELAY_ENABLED        run the outbox relay in this process (false when Debezium publishes the outbox) (default true)
    CASESTREAM_CASE_CONSUMER_ENABLED     run consumer case.saga-requests and the dashboard projection (default true)

    .. end settings-table

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

    database: str = Field("case", description="database name on CASESTREAM_PG_URL")
    port: int = Field(18101, ge=1, le=65535, description="HTTP listen port")
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="request body limit, bytes (larger: 413)")
    idempotency_ttl_s: float = Field(86_400.0, gt=0, description="how long idempotent responses are replayed, seconds")
    purge_interval_s: float = Field(300.0, gt=0, description="expired idempotency records purge period, seconds")
    pool_timeout_s: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds (then 503)")
    consumer_batch_size: int = Field(500, ge=1, description="events per consumer transaction")
    relay_enabled: bool = Field(True, description="run the outbox relay in this process (false when Debezium publishes the outbox)")
    consumer_enabled: bool = Field(True, description="run consumer case.saga-requests and the dashboard projection")
