"""Building blocks every service's ``bootstrap.py`` wires the same way.

Each service keeps one bootstrap module — the only place that builds adapters — but the
steps all five share live here once: migrate the service's database, prepare the codec
against the registry, and the readiness checks served at ``/readyz``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import psycopg

from casestream.catalog import Catalog
from casestream.codec import EnvelopeCodec
from casestream.db import Migration, apply_migrations
from casestream.errors import ConfigError
from casestream.registry import ConfluentSchemaRegistry
from casestream.service import ReadinessCheck
from casestream.settings import CommonSettings
from casestream.upcasters import default_upcasters


class _Pool(Protocol):
    def connection(self, timeout: float | None = None) -> Any: ...


class _Assignable(Protocol):
    @property
    def ready(self) -> Any: ...


def migrate(dsn: str, migrations: Sequence[Migration | Path], *, service: str) -> None:
    """Apply ``migrations`` (idempotent, see :func:`casestream.db.apply_migrations`).

    Raises:
        ConfigError: PostgreSQL is unreachable; the message names the URL and the variables
            that set it (``CASESTREAM_PG_URL``, ``CASESTREAM_<SERVICE>_DATABASE``).
    """
    try:
        apply_migrations(dsn, list(migrations))
    except psycopg.OperationalError as e:
        raise ConfigError(
            f"cannot reach PostgreSQL for the {service} service at {dsn} (CASESTREAM_PG_URL, "
            f"CASESTREAM_{service.upper()}_DATABASE): {e}") from e


def prepared_codec(settings: CommonSettings, catalog: Catalog) -> EnvelopeCodec:
    """An :class:`EnvelopeCodec` over the settings' registry, with every casestream upcaster,
    its schema ids registered (``CASESTREAM_AUTO_REGISTER_SCHEMAS=true``) or looked up.

    The caller closes it (``ServiceProcess(closers=[codec.close])``).

    Raises:
        casestream.errors.SchemaError, RegistryUnavailable: see ``EnvelopeCodec.prepare``.
    """
    codec = EnvelopeCodec(catalog, ConfluentSchemaRegistry(settings.registry_url),
                          default_upcasters())
    codec.prepare(auto_register=settings.auto_register_schemas)
    return codec


def database_ready(pool: _Pool, table: str, *, timeout_s: float = 2.0) -> ReadinessCheck:
    """A readiness check that reads ``table`` through ``pool`` within ``timeout_s`` seconds."""

    def check() -> None:
        with pool.connection(timeout=timeout_s) as conn:  # readiness fails fast
            conn.execute(f"SELECT 1 FROM {table} LIMIT 1")  # table names are ours, not input

    return check


def consumer_ready(consumer: _Assignable) -> ReadinessCheck:
    """A readiness check that passes once the consumer runtime has a partition assignment."""

    def check() -> None:
        if not consumer.ready.is_set():
            raise RuntimeError("consumer has no partition assignment yet")

    return check
