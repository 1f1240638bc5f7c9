"""Settings of the saga-orchestrator, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
the orchestrator's own settings use the prefix ``CASESTREAM_SAGA_``:

    CASESTREAM_SAGA_HOST / _PORT            HTTP listen address (127.0.0.1:18103)
    CASESTREAM_SAGA_DATABASE                database name on CASESTREAM_PG_URL ("saga")
    CASESTREAM_SAGA_DECISION_DEADLINE_S     wait for a decision before compensating (300)
    CASESTREAM_SAGA_NOTICE_DEADLINE_S       wait for the notice outcome before MANUAL_REVIEW (900)
    CASESTREAM_SAGA_CLOSE_DEADLINE_S / _CLOSE_ATTEMPTS     close request re-issue (120 s, 3)
    CASESTREAM_SAGA_RETURN_DEADLINE_S / _RETURN_ATTEMPTS   compensation re-issue (120 s, 3)
    CASESTREAM_SAGA_SCHEDULER_INTERVAL_S    deadline scan period when idle (1.0)
    CASESTREAM_SAGA_SCHEDULER_BATCH         sagas claimed per deadline round (100)
    CASESTREAM_SAGA_CONSUMER_BATCH          messages per consumer transaction (200)
    CASESTREAM_SAGA_POOL_SIZE               PostgreSQL connections (6)
    CASESTREAM_SAGA_STUCK_GRACE_S           delay past a deadline before a saga counts as stuck (60)
    CASESTREAM_SAGA_MAX_IN_FLIGHT           HTTP requests in flight before shedding with 503 (32)
    CASESTREAM_SAGA_RATE_TENANT_PER_S / _RATE_TENANT_BURST  per-tenant token bucket (400/s, 800)
    CASESTREAM_SAGA_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST  per-client token bucket (100/s, 200)
    CASESTREAM_SAGA_REQUEST_DEADLINE_S      budget of a request's database calls, seconds (5)

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

    port: int = 18103
    database: str = "saga"
    decision_deadline_s: float = Field(300.0, gt=0)
    notice_deadline_s: float = Field(900.0, gt=0)
    close_deadline_s: float = Field(120.0, gt=0)
    close_attempts: int = Field(3, ge=1)
    return_deadline_s: float = Field(120.0, gt=0)
    return_attempts: int = Field(3, ge=1)
    scheduler_interval_s: float = Field(1.0, gt=0)
    scheduler_batch: int = Field(100, ge=1)
    consumer_batch: int = Field(200, ge=1)
    pool_size: int = Field(6, ge=2)
    stuck_grace_s: float = Field(60.0, ge=0)
