"""Settings of the decision service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
decision-specific ones use the prefix ``CASESTREAM_DECISION_``:

    CASESTREAM_DECISION_HOST / _PORT      HTTP listen address (127.0.0.1:18104)
    CASESTREAM_DECISION_DATABASE          database name on CASESTREAM_PG_URL ("decision")
    CASESTREAM_DECISION_CONSUMER_BATCH    messages per consumer transaction (200)
    CASESTREAM_DECISION_POOL_SIZE         PostgreSQL connections (4)
    CASESTREAM_DECISION_MAX_IN_FLIGHT  HTTP requests in flight before shedding with 503 (32)
    CASESTREAM_DECISION_RATE_TENANT_PER_S / _RATE_TENANT_BURST  per tenant (400/s, 800)
    CASESTREAM_DECISION_RATE_CLIENT_PER_S / _RATE_CLIENT_BURST  per client (100/s, 200)
    CASESTREAM_DECISION_REQUEST_DEADLINE_S  budget of a request's database calls, seconds (5)

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

    port: int = Field(18104, ge=1, le=65535)
    database: str = "decision"
    consumer_batch: int = Field(200, ge=1)
    pool_size: int = Field(5, ge=3)
