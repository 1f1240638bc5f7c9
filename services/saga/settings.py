"""Settings of the saga-orchestrator, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
the orchestrator's own settings use the prefix ``CASESTREAM_SAGA_``:

    casestream settings saga    prints them, with defaults (generated from the fields below)

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
