"""Settings shared by every casestream service, read once from ``CASESTREAM_*`` variables.

Each service subclasses :class:`CommonSettings` in its own ``settings.py`` with its own
prefix (``CASESTREAM_CASE_``, ...). Nothing else in the suite reads ``os.environ``:
settings objects are built once in a service's bootstrap and passed down.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from casestream.errors import ConfigError


class CommonSettings(BaseSettings):
    """Infrastructure endpoints every service needs.

    Environment variables (prefix ``CASESTREAM_``):
        KAFKA_BOOTSTRAP: Kafka ``bootstrap.servers``, e.g. ``127.0.0.1:19092``.
        REGISTRY_URL: Confluent-API schema registry base URL.
        PG_URL: PostgreSQL server URL without a database name; a service appends its own.
        AUTO_REGISTER_SCHEMAS: register schemas at start (development); production sets
            ``false`` and services only look ids up, failing at start if one is missing.
        LOG_LEVEL: Python logging level name.
        SMTP_HOST / SMTP_PORT: the SMTP server notices are sent through.
        KAFKA_SESSION_TIMEOUT_MS: consumers' ``session.timeout.ms`` (librdkafka default 45000):
            how long a crashed consumer keeps its partitions before the group rebalances.
            The broker bounds it (``group.min.session.timeout.ms``, 6000 by default).
    """

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:19092"
    registry_url: str = "http://127.0.0.1:18081/apis/ccompat/v7"
    pg_url: str = "postgresql://postgres@127.0.0.1:15432"
    auto_register_schemas: bool = True
    log_level: str = "INFO"
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 12525
    kafka_session_timeout_ms: int = 45000

    def consumer_config(self) -> dict[str, object]:
        """librdkafka consumer settings common to every consumer runtime of a service:
        ``bootstrap.servers``, ``session.timeout.ms`` and ``heartbeat.interval.ms`` (a third
        of the session timeout, capped at 3000 ms, Kafka's default)."""
        return {
            "bootstrap.servers": self.kafka_bootstrap,
            "session.timeout.ms": self.kafka_session_timeout_ms,
            "heartbeat.interval.ms": min(3000, self.kafka_session_timeout_ms // 3),
        }

    def database_url(self, database: str) -> str:
        """Return ``pg_url`` joined with ``database`` (``postgresql://…/<database>``).

        Raises:
            ConfigError: if ``database`` is empty.
        """
        if not database:
            raise ConfigError("database name is empty")
        return f"{self.pg_url.rstrip('/')}/{database}"
