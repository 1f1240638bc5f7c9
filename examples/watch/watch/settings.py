"""Settings of the watch service, read once from the environment by the builder.

Common endpoints come from ``casestream.service.CommonSettings`` (``CASESTREAM_*``: Kafka,
registry, PostgreSQL server, schema auto-registration); watch-specific ones use the
``CASESTREAM_WATCH_`` prefix:

    casestream settings watch    prints them, with defaults (generated from the fields below)
"""

from __future__ import annotations

from pydantic import Field

from casestream.service import ServiceSettings, service_config


class WatchSettings(ServiceSettings):
    """Frozen settings of the watch service (see the module docstring for the variables).

    Fields are read only from their prefixed variable; in code pass the variable names,
    e.g. ``WatchSettings(CASESTREAM_WATCH_PORT=0)``.
    """

    model_config = service_config("CASESTREAM_WATCH_")

    database: str = Field("watch", description="database name on CASESTREAM_PG_URL")
    port: int = Field(18111, ge=1, le=65535, description="HTTP listen port")
    pool_timeout_s: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds")
    relay_enabled: bool = Field(True, description="run the outbox relay in this process")
