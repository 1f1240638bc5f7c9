"""Settings of the decision service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
decision-specific ones use the prefix ``CASESTREAM_DECISION_``:

    casestream settings decision    prints them, with defaults (generated from the fields below)

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
