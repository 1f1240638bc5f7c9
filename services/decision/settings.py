"""Settings of the decision service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.settings.CommonSettings` (``CASESTREAM_*``);
decision-specific ones use the prefix ``CASESTREAM_DECISION_``:

    CASESTREAM_DECISION_HOST / _PORT      HTTP listen address (127.0.0.1:18104)
    CASESTREAM_DECISION_DATABASE          database name on CASESTREAM_PG_URL ("decision")
    CASESTREAM_DECISION_CONSUMER_BATCH    messages per consumer transaction (200)
    CASESTREAM_DECISION_POOL_SIZE         PostgreSQL connections (4)
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from casestream.settings import CommonSettings

_P = "CASESTREAM_DECISION_"


class DecisionSettings(CommonSettings):
    """Frozen settings of the decision service (see the module docstring for variables)."""

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore",
                                      populate_by_name=True)

    host: str = Field("127.0.0.1", validation_alias=_P + "HOST")
    port: int = Field(18104, ge=1, le=65535, validation_alias=_P + "PORT")
    database: str = Field("decision", validation_alias=_P + "DATABASE")
    consumer_batch: int = Field(200, ge=1, validation_alias=_P + "CONSUMER_BATCH")
    pool_size: int = Field(4, ge=2, validation_alias=_P + "POOL_SIZE")
