"""Settings of the saga-orchestrator, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
the orchestrator's own settings use the prefix ``CASESTREAM_SAGA_``:

    .. settings-table (generated: casestream.service.settings_table; tests/unit/test_settings_tables.py)

    CASESTREAM_SAGA_DATABASE              database name on CASESTREAM_PG_URL (default saga)
    CASESTREAM_SAGA_HOST                  HTTP listen address (default 127.0.0.1)
    CASESTREAM_SAGA_MAX_IN_FLIGHT         HTTP requests in flight before shedding with 503 (default 32)
    CASESTREAM_SAGA_RATE_TENANT_PER_S     per-tenant token bucket, requests per second (default 400)
    CASESTREAM_SAGA_RATE_TENANT_BURST     per-tenant token bucket size (default 800)
    CASESTREAM_SAGA_RATE_CLIENT_PER_S     per-client token bucket, requests per second (default 100)
    CASESTREAM_SAGA_RATE_CLIENT_BURST     per-client token bucket size (default 200)
    CASESTREAM_SAGA_REQUEST_DEADLINE_S    budget of a request's database calls, seconds (default 5)
    CASESTREAM_SAGA_POOL_SIZE             PostgreSQL pool size (most connections) (default 6)
    CASESTREAM_SAGA_POOL_MIN              connections the pool keeps open (default 2)
    CASESTREAM_SAGA_POOL_TIMEOUT_S        wait for a pooled connection, seconds (default 30)
    CASESTREAM_SAGA_CONSUMER_BATCH_SIZE   events per consumer transaction (default 200)
    CASESTREAM_SAGA_AUTH                  bearer-token settings as JSON; normally unset: AuthSettings reads CASESTREAM_AUTH_* (default -)
    CASESTREAM_SAGA_PORT                  HTTP listen port (default 18103)
    CASESTREAM_SAGA_DECISION_DEADLINE_S   wait for a decision before compensating, seconds (default 300)
    CASESTREAM_SAGA_NOTICE_DEADLINE_S     wait for the notice outcome before MANUAL_REVIEW, seconds (default 900)
    CASESTREAM_SAGA_CLOSE_DEADLINE_S      close request re-issue period, seconds (default 120)
    CASESTREAM_SAGA_CLOSE_ATTEMPTS        close requests before giving up (default 3)
    CASESTREAM_SAGA_RETURN_DEADLINE_S     compensation re-issue period, seconds (default 120)
    CASESTREAM_SAGA_RETURN_ATTEMPTS       compensation requests before COMPENSATION_FAILED (default 3)
    CASESTREAM_SAGA_SCHEDULER_INTERVAL_S  deadline scan period when idle, seconds (default 1)
    CASESTREAM_SAGA_SCHEDULER_BATCH       sagas claimed per deadline round (default 100)
    CASESTREAM_SAGA_STUCK_GRACE_S         delay past a deadline before a saga counts as stuck, seconds (default 60)

    .. end settings-table

Bearer tokens are verified per ``casestream.auth.tokens.AuthSettings`` (``CASESTREAM_AUTH_*``).
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config

_P = "CASESTREAM_SAGA_"


class SagaSettings(ServiceSettings):
    """Frozen settings of the saga-orchestrator (see the module docstring for variables).

    The HTTP edge fields (host, limits, deadline, auth) and ``dsn``: :class:`ServiceSettings`.
    """

    model_config = service_config(_P)

    port: int = Field(18103, description="HTTP listen port")
    database: str = Field("saga", description="database name on CASESTREAM_PG_URL")
    decision_deadline_s: float = Field(300.0, gt=0, description="wait for a decision before compensating, seconds")
    notice_deadline_s: float = Field(900.0, gt=0, description="wait for the notice outcome before MANUAL_REVIEW, seconds")
    close_deadline_s: float = Field(120.0, gt=0, description="close request re-issue period, seconds")
    close_attempts: int = Field(3, ge=1, description="close requests before giving up")
    return_deadline_s: float = Field(120.0, gt=0, description="compensation re-issue period, seconds")
    return_attempts: int = Field(3, ge=1, description="compensation requests before COMPENSATION_FAILED")
    scheduler_interval_s: float = Field(1.0, gt=0, description="deadline scan period when idle, seconds")
    scheduler_batch: int = Field(100, ge=1, description="sagas claimed per deadline round")
    pool_size: int = Field(6, ge=2, description="PostgreSQL pool size (most connections)")
    stuck_grace_s: float = Field(60.0, ge=0, description="delay past a deadline before a saga counts as stuck, seconds")
