"""Settings of the decision service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
decision-specific ones use the prefix ``CASESTREAM_DECISION_``:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_settings_tables.py)

    CASESTREAM_DECISION_DATABASE             database name on CASESTREAM_PG_URL (default decision)
    CASESTREAM_DECISION_HOST                 HTTP listen address (default 127.0.0.1)
    CASESTREAM_DECISION_MAX_IN_FLIGHT        HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_DECISION_RATE_TENANT_PER_S    per-tenant token bucket, requests per second (default 400)
    CASESTREAM_DECISION_RATE_TENANT_BURST    per-tenant token bucket size (default 800)
    CASESTREAM_DECISION_RATE_CLIENT_PER_S    per-client token bucket, requests per second (default 100)
    CASESTREAM_DECISION_RATE_CLIENT_BURST    per-client token bucket size (default 200)
    CASESTREAM_DECISION_REQUEST_DEADLINE_S   budget of a request's database calls, seconds (default 5)
    CASESTREAM_DECISION_POOL_SIZE            PostgreSQL pool size (most connections) (default 5)
    CASESTREAM_DECISION_POOL_MIN             connections the pool keeps open (default 2)
    CASESTREAM_DECISION_POOL_TIMEOUT_S       wait for a pooled connection, seconds (default 30)
    CASESTREAM_DECISION_CONSUMER_BATCH_SIZE  events per consumer transaction (default 200)
    CASESTREAM_DECISION_AUTH                 bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_DECISION_PORT                 HTTP listen port (default 18104)

    .. end settings-table

Bearer tokens are verified per ``casestream.auth.tokens.AuthSettings`` (``CASESTREAM_AUTH_*``).
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config

_P = "CASESTREAM_DECISION_"


class DecisionSettings(ServiceSettings):
    """Frozen settings of the decision service (see the module docstring for variables).

    The HTTP edge fields (host, limits, deadline, auth) and ``dsn``: :class:`ServiceSettings`.
    """

    model_config = service_config(_P)

    port: int = Field(18104, ge=1, le=65535, description="HTTP listen port")
    database: str = Field("decision", description="database name on CASESTREAM_PG_URL")
    pool_size: int = Field(5, ge=3, description="PostgreSQL pool size (most connections)")
