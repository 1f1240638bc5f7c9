"""Settings of the watch service, read once from the environment by the builder.

Common endpoints come from ``casestream.service.CommonSettings`` (``CASESTREAM_*``: Kafka,
registry, PostgreSQL server, schema auto-registration); watch-specific ones use the
``CASESTREAM_WATCH_`` prefix:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_watch_guide.py)

    CASESTREAM_WATCH_DATABASE             database name on CASESTREAM_PG_URL (default watch)
    CASESTREAM_WATCH_HOST                 HTTP listen address (default 127.0.0.1)
    CASESTREAM_WATCH_MAX_IN_FLIGHT        HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_WATCH_RATE_TENANT_PER_S    per-tenant token bucket, requests per second (default 400)
    CASESTREAM_WATCH_RATE_TENANT_BURST    per-tenant token bucket size (default 800)
    CASESTREAM_WATCH_RATE_CLIENT_PER_S    per-client token bucket, requests per second (default 100)
    CASESTREAM_WATCH_RATE_CLIENT_BURST    per-client token bucket size (default 200)
    CASESTREAM_WATCH_REQUEST_DEADLINE_S   budget of a request's database calls, seconds (default 5)
    CASESTREAM_WATCH_POOL_SIZE            PostgreSQL pool size (most connections) (default 10)
    CASESTREAM_WATCH_POOL_MIN             connections the pool keeps open (default 2)
    CASESTREAM_WATCH_POOL_TIMEOUT_S       wait for a pooled connection, seconds (default 5)
    CASESTREAM_WATCH_CONSUMER_BATCH_SIZE  events per consumer transaction (default 200)
    CASESTREAM_WATCH_AUTH                 bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_WATCH_PORT                 HTTP listen port (default 18111)
    CASESTREAM_WATCH_RELAY_ENABLED        run the outbox relay in this process (default true)

    .. end settings-table
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config


class WatchSettings(ServiceSettings):
    """Frozen settings of the watch service (see the module docstring for the variables).

    Fields are read only from their prefixed variable; in code pass the variable names,
    e.g. ``WatchSettings(CASESTREAM_WATCH_PORT=0)``.
    """

    model_config = service_config("CASESTREAM_WATCH_")

    database: str = Field("watch", description="database name on CASESTREAM_PG_URL")
    port: int = Field(18111, ge=1, le=65535, description="HTTP listen port")
    pool_timeout_s: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds")
    relay_enabled: bool = Field(True, description="run the outbox relay in this process")
