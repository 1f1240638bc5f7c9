"""Settings of the audit service, read once from the environment in ``bootstrap``.

Common endpoints come from :class:`casestream.settings.CommonSettings` (``CASESTREAM_*``);
audit-specific ones use the ``CASESTREAM_AUDIT_`` prefix:

    CASESTREAM_AUDIT_DATABASE           database name (default ``audit``)
    CASESTREAM_AUDIT_HOST / _PORT       HTTP listen address (default 127.0.0.1:18102)
    CASESTREAM_AUDIT_POOL_MIN / _MAX    PostgreSQL pool size for reads (default 1 / 8)
    CASESTREAM_AUDIT_POOL_TIMEOUT_S     wait for a pooled connection, seconds (default 5)
    CASESTREAM_AUDIT_BATCH_SIZE         events per consumer transaction (default 500)
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from casestream.settings import CommonSettings

_PREFIX = "CASESTREAM_AUDIT_"


def _env(name: str) -> AliasChoices:
    return AliasChoices(_PREFIX + name.upper())


class AuditSettings(CommonSettings):
    """Frozen settings of the audit service (see module docstring for the variables).

    Fields are read only from their prefixed variable (never ``CASESTREAM_PORT`` & co.);
    in code pass the variable names, e.g. ``Settings(CASESTREAM_CASE_PORT=0)``.
    """

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore")

    database: str = Field("audit", validation_alias=_env("database"))
    host: str = Field("127.0.0.1", validation_alias=_env("host"))
    port: int = Field(18102, ge=1, le=65535, validation_alias=_env("port"))
    pool_min: int = Field(1, ge=1, validation_alias=_env("pool_min"))
    pool_max: int = Field(8, ge=1, validation_alias=_env("pool_max"))
    pool_timeout_s: float = Field(5.0, gt=0, validation_alias=_env("pool_timeout_s"))
    batch_size: int = Field(500, ge=1, validation_alias=_env("batch_size"))

    @property
    def dsn(self) -> str:
        """The audit database URL."""
        return self.database_url(self.database)
