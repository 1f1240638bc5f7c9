"""Building blocks every service's ``bootstrap.py`` wires the same way.

Each service keeps one bootstrap module — the only place that builds adapters — but the
steps they share live here once: read the settings, migrate the service's database,
prepare the codec against the registry (:func:`groundwork` does these in order), the
connection pool, consumer runtime and outbox relay of a service, and the readiness checks
served at ``/readyz``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar
from weakref import WeakKeyDictionary

import psycopg
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from casestream.events.catalog import Catalog, load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.consumer.group import ConsumerGroup
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.migrations import Migration, apply_migrations
from casestream.events.envelope import Envelope
from casestream.errors import ConfigError
from casestream.service.gctune import freeze_startup_objects
from casestream.consumer.handlers import HandlerRegistry
from casestream.http.edge import EdgePolicy, edge_policy
from casestream.kafka.config import producer_config
from casestream.outbox.writer import OUTBOX_MIGRATION, OutboxWriter
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.outbox.relay.core import OutboxRelay
from casestream.service.process import ReadinessCheck, configure_logging
from casestream.service.settings import CommonSettings, ServiceSettings, settings_error
from casestream.telemetry.readiness import dependency_checks
from casestream.upcasters import default_upcasters

S = TypeVar("S", bound=CommonSettings)


class _Pool(Protocol):
    def connection(self, timeout: float | None = None) -> Any: ...


class _Assignable(Protocol):
    @property
    def ready(self) -> Any: ...


class OutboxSink:
    """The ``EventSink`` handlers hand to their application layer: ``outbox`` (an
    :class:`~casestream.outbox.writer.OutboxWriter`, or the runtime's ``ctx.outbox``) bound to
    ``conn``, so the events commit in the caller's transaction."""

    def __init__(self, outbox: Any, conn: Any):
        self.outbox = outbox
        self.conn = conn

    def append(self, events: Sequence[Envelope]) -> None:
        """Append ``events`` to the outbox on the bound connection (none: no-op)."""
        if events:
            self.outbox.append(self.conn, list(events))


def migrate(dsn: str, migrations: Sequence[Migration | Path], *, service: str) -> None:
    """Apply ``migrations`` (idempotent, see :func:`casestream.migrations.apply_migrations`).

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


def utc_now() -> datetime:
    """Timezone-aware UTC now: the clock services hand to their application layer."""
    return datetime.now(UTC)


def read_settings(settings_class: type[S], service: str) -> S:
    """``settings_class()`` read from the environment.

    Raises:
        ConfigError: a variable has an invalid value (the message names it).
    """
    try:
        return settings_class()
    except ValidationError as e:
        raise ConfigError(f"invalid {service} settings: {settings_error(e, settings_class)}") from None


def service_migrations(folder: Path, *, outbox: bool = True) -> list[Migration | Path]:
    """The outbox migration (unless ``outbox=False``: a service that emits no events),
    then ``folder/*.sql`` in name order.

    Raises:
        ConfigError: ``folder`` is missing or holds no ``*.sql`` (e.g. an install without them).
    """
    own: list[Migration | Path] = sorted(folder.glob("*.sql"))
    if not own:
        raise ConfigError(f"{folder.parent.name} migrations folder {folder} not found or without "
                          "*.sql files: the installation lacks the service's migrations")
    return [OUTBOX_MIGRATION, *own] if outbox else own


@dataclass(frozen=True, slots=True)
class Groundwork:
    """What every service's ``build()`` starts from (see :func:`groundwork`).

    Attributes:
        edge: the HTTP edge policy (``casestream.http.edge_policy``).
        catalog: the event catalog.
        codec: the prepared codec; the caller closes it (``closers=[codec.close]``).
    """

    edge: EdgePolicy
    catalog: Catalog
    codec: EnvelopeCodec


def groundwork(settings: ServiceSettings, service: str,
               migrations: Sequence[Migration | Path]) -> Groundwork:
    """Configure logging, build the edge policy, migrate ``settings.dsn``, load the catalog
    and prepare the codec — in this order, so a bad key is reported before the database
    is touched — then freeze the start-up objects (``settings.gc_freeze``,
    :func:`casestream.service.gctune.freeze_startup_objects`).

    Raises:
        ConfigError: unusable bearer key, invalid settings or unreachable PostgreSQL.
        casestream.errors.SchemaError, RegistryUnavailable: see :func:`prepared_codec`.
    """
    configure_logging(service, settings.log_level)
    edge = edge_policy(settings, service)
    migrate(settings.dsn, migrations, service=service)
    catalog = load_catalog()
    codec = prepared_codec(settings, catalog)
    freeze_startup_objects(settings.gc_freeze)
    return Groundwork(edge=edge, catalog=catalog, codec=codec)


def connection_pool(dsn: str, service: str, max_size: int) -> ConnectionPool[Any]:
    """An open pool of 2..``max_size`` connections to ``dsn``, named after ``service`` in
    ``pg_stat_activity``. The caller closes it (``closers=[pool.close]``)."""
    return ConnectionPool(dsn, min_size=2, max_size=max_size, open=True,
                          kwargs={"application_name": service})


def event_types_on(catalog: Catalog, topics: Sequence[str]) -> list[str]:
    """The catalog's event types published on any of ``topics`` (catalog order)."""
    return [t for t in catalog.event_types if catalog.subject_for(t).topic in topics]


class _HandlersModule(Protocol):
    CONSUMER: str
    TOPICS: tuple[str, ...]


def consumer_runtime(handlers: _HandlersModule, registry: HandlerRegistry,
                     codec: EnvelopeCodec, pool: ConnectionPool[Any], settings: CommonSettings,
                     *, batch_size: int | None = None,
                     outbox: OutboxWriter | None = None) -> ConsumerRuntime | ConsumerGroup:
    """The consumer runtime ``handlers.CONSUMER`` on ``handlers.TOPICS`` (a service's
    ``adapters/handlers`` module), committing ``batch_size`` events per transaction
    (None: :class:`ConsumerSettings`' default); ``outbox`` for handlers that emit events.
    With ``settings.consumer_concurrency`` > 1, a :class:`ConsumerGroup` of that many
    members (same ``run``/``ready`` surface).

    Raises:
        ConfigError: see :class:`~casestream.consumer.runtime.ConsumerRuntime`.
    """
    batching = ConsumerSettings() if batch_size is None else ConsumerSettings(batch_size=batch_size)
    args = (handlers.TOPICS, registry, codec, pool, settings.consumer_config(), batching)
    _reserve_connections(pool, settings.consumer_concurrency, handlers.CONSUMER)
    if settings.consumer_concurrency > 1:
        return ConsumerGroup(settings.consumer_concurrency, handlers.CONSUMER, *args, outbox=outbox)
    return ConsumerRuntime(handlers.CONSUMER, *args, outbox=outbox)


_RESERVED: WeakKeyDictionary[Any, int] = WeakKeyDictionary()  # pool -> connections held by consumers


def _reserve_connections(pool: Any, members: int, consumer: str) -> None:
    """Count the pooled connections ``consumer``'s members hold while they run; with more
    than one member per consumer, refuse a pool they would leave without a free connection
    (readiness checks and HTTP reads would then time out waiting for one).

    Raises:
        ConfigError: naming CASESTREAM_CONSUMER_CONCURRENCY and the pool's size.
    """
    try:
        total = _RESERVED.get(pool, 0) + members
        _RESERVED[pool] = total
    except TypeError:  # not weak-referenceable (a test double): nothing to check
        return
    max_size = getattr(pool, "max_size", None)
    if members > 1 and isinstance(max_size, int) and total >= max_size:
        raise ConfigError(
            f"CASESTREAM_CONSUMER_CONCURRENCY={members}: the consumers of this service hold "
            f"{total} of its pool's {max_size} connections ({consumer} included), leaving none "
            f"for readiness checks and requests; raise the service's pool size above {total} "
            f"or lower the concurrency")


def outbox_relay(pool: ConnectionPool[Any], settings: CommonSettings,
                 service: str) -> OutboxRelay:
    """The outbox relay of ``service``'s database, named and Kafka client id
    ``<service>.relay``."""
    name = f"{service}.relay"
    return OutboxRelay(pool, producer_config(settings.kafka_bootstrap, client_id=name),
                       name=name)


def readiness(pool: _Pool, table: str, consumer: _Assignable,
              settings: CommonSettings) -> dict[str, ReadinessCheck]:
    """``/readyz`` checks of a service with one consumer: ``postgres`` (reads ``table``),
    ``consumer`` (has an assignment), ``kafka`` and ``registry`` (reachable)."""
    return {"postgres": database_ready(pool, table), "consumer": consumer_ready(consumer),
            **dependency_checks(settings.kafka_bootstrap, settings.registry_url)}
