"""Settings of the case service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.service.settings.CommonSettings` (``CASESTREAM_*``);
case-specific ones use the ``CASESTREAM_CASE_`` prefix:

    casestream settings case    prints them, with defaults (generated from the fields below)

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
    idempotency_ttl_s: float = Field(86_400.0, gt=0, description="how long idempotent responses are replayed, seconds")
    purge_interval_s: float = Field(300.0, gt=0, description="expired idempotency records purge period, seconds")
    pool_timeout_s: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds (then 503)")
    consumer_batch_size: int = Field(500, ge=1, description="events per consumer transaction")
    relay_enabled: bool = Field(True, description="run the outbox relay in this process (false when Debezium publishes the outbox)")
    evidence_grace_s: float = Field(7 * 86_400.0, gt=0, description="time from the overdue-evidence reminder to the escalation to manual review, seconds")
    deadline_interval_s: float = Field(30.0, gt=0, description="evidence deadline scan period (reminders, escalations), seconds")
    consumer_enabled: bool = Field(True, description="run consumer case.saga-requests and the dashboard projection")


def projection_dsn() -> str:
    """The case database's URL from the environment (``CaseSettings().dsn``): the ``dsn`` of
    the case service's projections (``case.dashboard``, ``case.workload``).

    Raises:
        pydantic.ValidationError: an invalid ``CASESTREAM_CASE_*`` variable.
        ConfigError: an empty database name.
    """
    return CaseSettings().dsn
