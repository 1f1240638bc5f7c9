"""Settings of the watch service, read once from the environment by the builder.

Common endpoints come from ``casestream.service.CommonSettings`` (``CASESTREAM_*``: Kafka,
registry, PostgreSQL server, auto-registration of schemas); the HTTP edge and pool fields
from ``casestream.service.ServiceSettings``; watch-specific ones use the
``CASESTREAM_WATCH_`` prefix:

    CASESTREAM_WATCH_DATABASE           database name (default ``watch``)
    CASESTREAM_WATCH_HOST / _PORT       HTTP listen address (default 127.0.0.1:18111)
    CASESTREAM_WATCH_RELAY_ENABLED      run the outbox relay in this process (default true)
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

    database: str = Field("watch", description="database name")
    port: int = Field(18111, ge=1, le=65535, description="HTTP listen port")
    relay_enabled: bool = Field(True, description="run the outbox relay in this process")
