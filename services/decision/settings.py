"""Settings of the decision service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.settings.CommonSettings` (``CASESTREAM_*``);
decision-specific ones use the prefix ``CASESTREAM_DECISION_``:

    CASESTREAM_DECISION_HOST / _PORT      HTTP listen address (127.0.0.1:18104)
    CASESTREAM_DECISION_DATABASE          database name on CASESTREAM_PG_URL ("decision")
    CASESTREAM_DECISION_CONSUMER_BATCH    messages per consumer transaction (200)
    CASESTREAM_DECISION_POOL_SIZE         PostgreSQL connections (4)
    CASESTREAM_DECISION_MAX_IN_FLIGHT  HTTP requests in flight before shedding with 503 (32)
    CASESTREAM_DECISION_RATE_TENANT_PER_S / _RATE_TENANT_BURST  per tenant (400/s, 800)
    CASESTREAM_DECISION_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST  per client (100/s, 200)
    CASESTREAM_DECISION_REQUEST_DEADLINE_S  budget of a request's database calls, seconds (5)

Bearer tokens are verified per ``casestream.auth.AuthSettings`` (``CASESTREAM_AUTH_*``).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from casestream.auth import AuthSettings
from casestream.settings import CommonSettings

_P = "CASESTREAM_DECISION_"


class DecisionSettings(CommonSettings):
    """Frozen settings of the decision service (see the module docstring for variables)."""

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore")

    host: str = Field("127.0.0.1", validation_alias=_P + "HOST")
    port: int = Field(18104, ge=1, le=65535, validation_alias=_P + "PORT")
    database: str = Field("decision", validation_alias=_P + "DATABASE")
    consumer_batch: int = Field(200, ge=1, validation_alias=_P + "CONSUMER_BATCH")
    pool_size: int = Field(5, ge=3, validation_alias=_P + "POOL_SIZE")
    max_in_flight: int = Field(32, ge=1, validation_alias=_P + "MAX_IN_FLIGHT")
    rate_tenant_per_s: float = Field(400.0, gt=0, validation_alias=_P + "RATE_TENANT_PER_S")
    rate_tenant_burst: int = Field(800, ge=1, validation_alias=_P + "RATE_TENANT_BURST")
    rate_client_per_s: float = Field(100.0, gt=0, validation_alias=_P + "RATE_CLIENT_PER_S")
    rate_client_burst: int = Field(200, ge=1, validation_alias=_P + "RATE_CLIENT_BURST")
    request_deadline_s: float = Field(5.0, gt=0, validation_alias=_P + "REQUEST_DEADLINE_S")
    auth: AuthSettings = Field(default_factory=AuthSettings,
                               validation_alias=AliasChoices(_P + "AUTH"))
