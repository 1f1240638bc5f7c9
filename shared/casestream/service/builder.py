"""The one composition object of a casestream service: :class:`ServiceBuilder`.

A service's ``bootstrap.build()`` names its configuration (spec, settings, schemas folders:
data, no I/O), calls :meth:`ServiceBuilder.start`, which owns the start-up work in this order:
settings (read once, frozen), logging, the HTTP edge policy, migrations (the spec's folder),
catalog, codec, connection pool; then declares what it runs — its consumers, projections,
relay, extra workers and HTTP app; then, at :meth:`ServiceBuilder.build`, the check of the
declared consumers and projections against the spec, the pool-size check against the
consumers it created, the readiness checks, the closers and the
:class:`~casestream.service.process.ServiceProcess`. Tests build services the same way
(pass a settings object, and any ready parts: catalog, codec, pool). Example::

    def build(settings: DecisionSettings | None = None) -> ServiceProcess:
        b = ServiceBuilder(SERVICE, settings, schemas=[schemas_dir()]).start()
        b.consumer(handlers.CONSUMER, handlers.TOPICS, handlers.register(HandlerRegistry(), Decider(clock=b.clock)),
                   emits=True)
        b.projection(statistics.PROJECTION)
        b.relay()
        return b.build(app=build_app(PgDecisionQueries(b.request_pool), edge=b.edge), ready_table="decision")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from casestream.clock import SystemClock
from casestream.consumer.group import ConsumerGroup
from casestream.handlers.registry import HandlerRegistry
from casestream.handlers.guard import FirstSeenPolicy
from casestream.handlers.projection import ProjectionSpec
from casestream.consumer.retention import InboxRetention, RetentionSettings
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.errors import ConfigError
from casestream.events.catalog import Catalog, load_catalog
from casestream.events.codec import EnvelopeCodec, open_codec
from casestream.forks import ProcessBound
from casestream.http.edge import EdgePolicy, edge_policy
from casestream.http.pgdeadline import DeadlinePool
from casestream.http.pgidempotency import IDEMPOTENCY_MIGRATIONS
from casestream.kafka.builds import consumer_client_id
from casestream.kafka.config import producer_config
from casestream.migrations import Migration, apply_migrations
from casestream.operations.afterdeploy import AfterDeployRedrives
from casestream.operations.depth import DeadLetterDepth
from casestream.outbox.relay.core import OutboxRelay
from casestream.outbox.cdc import CdcRetention, default_slot_name
from casestream.outbox.relay.settings import RelaySettings, relay_retry
from casestream.outbox.writer import OUTBOX_MIGRATIONS, OutboxWriter
from casestream.service.gctune import freeze_startup_objects
from casestream.service.process import ReadinessCheck, ServiceProcess, Worker, configure_logging
from casestream.service.settings import ServiceSettings, read_settings, shown_conninfo
from casestream.service.spec import ServiceSpec
from casestream.telemetry.readiness import dependency_checks

__all__ = ["ProcessPool", "ServiceBuilder", "consumer_ready", "migrate_service", "service_migrations"]

S = TypeVar("S", bound=ServiceSettings)

#: Events per transaction of a projection's live consumer (a projection batches its writes).
PROJECTION_BATCH_SIZE = 500


def service_migrations(folder: Path, *, outbox: bool = True) -> list[Migration | Path]:
    """The outbox migrations and the Idempotency-Key table (unless ``outbox=False``: a
    service that emits no events takes no commands), then ``folder/*.sql`` in name order.

    Raises:
        ConfigError: ``folder`` is missing or holds no ``*.sql`` (e.g. an install without them).
    """
    own: list[Migration | Path] = sorted(Path(folder).glob("*.sql"))
    if not own:
        raise ConfigError(f"{Path(folder).parent.name} migrations folder {folder} not found or without "
                          "*.sql files: the installation lacks the service's migrations")
    return [*OUTBOX_MIGRATIONS, *IDEMPOTENCY_MIGRATIONS, *own] if outbox else own


def _migrate(dsn: str, migrations: Sequence[Migration | Path], *, service: str) -> None:
    try:
        apply_migrations(dsn, list(migrations))
    except psycopg.OperationalError as e:
        detail = " ".join(str(e).split())
        if "does not exist" in detail:  # SQLSTATE 3D000 arrives as a connection failure
            raise ConfigError(
                f"the {service} service's database does not exist at {shown_conninfo(dsn)} (CASESTREAM_PG_URL, "
                f"CASESTREAM_{service.upper()}_DATABASE): create it (the dev stack, `make run`, "
                f"creates it; casestream.migrations.create_database): {detail}") from e
        raise ConfigError(
            f"cannot reach PostgreSQL for the {service} service at {shown_conninfo(dsn)} (CASESTREAM_PG_URL, "
            f"CASESTREAM_{service.upper()}_DATABASE): {detail}") from e


def migrate_service(spec: ServiceSpec, settings: ServiceSettings | None = None) -> list[str]:
    """Apply ``spec``'s migrations (:meth:`ServiceSpec.migrations_folder`, the outbox DDL
    first when ``spec.outbox``) to its database; return the names applied now (empty: up to
    date). What ``casestream migrate`` runs; idempotent and safe beside starting instances
    (an advisory lock, :func:`casestream.migrations.apply_migrations`).

    Raises:
        ConfigError: invalid settings, missing migrations folder, database missing or
            unreachable, or an applied migration changed.
    """
    s = settings if settings is not None else read_settings(spec.settings_class(), spec.name)
    files = service_migrations(spec.migrations_folder(), outbox=spec.outbox)
    try:
        return apply_migrations(s.dsn, list(files))
    except psycopg.OperationalError:
        _migrate(s.dsn, files, service=spec.name)  # raises the one-line ConfigError
        raise


class ProcessPool(ConnectionPool):
    """The service's ``psycopg_pool.ConnectionPool``, refusing use in a process forked after
    it was made (its connections are the parent's sockets, its worker threads are gone).

    Raises (``getconn``, ``connection``):
        ForkedClientError: used in a forked process.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._made_in = ProcessBound(f"connection pool {kwargs.get('name') or ''}".rstrip())
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> Any:
        self._made_in.check()
        return super().getconn(timeout)


def _database_ready(pool: Any, table: str, *, timeout_s: float = 2.0) -> ReadinessCheck:
    def check() -> None:
        with pool.connection(timeout=timeout_s) as conn:  # readiness fails fast
            conn.execute(f"SELECT 1 FROM {table} LIMIT 1")  # table names are ours, not input

    return check


def _outbox_writable(pool: Any, *, timeout_s: float = 2.0) -> ReadinessCheck:
    """The service can append to its outbox: the database accepts writes (not a standby, not
    ``default_transaction_read_only``) and the service's role may INSERT into ``outbox``."""

    def check() -> None:
        with pool.connection(timeout=timeout_s) as conn:  # readiness fails fast
            row = conn.execute("SELECT has_table_privilege('outbox', 'INSERT'), pg_is_in_recovery(), "
                               "current_setting('transaction_read_only')").fetchone()
        insert, standby, read_only = row
        if standby or read_only == "on":
            raise RuntimeError("outbox: the database is read-only" + (" (a standby)" if standby else ""))
        if not insert:
            raise RuntimeError("outbox: no INSERT privilege on table outbox")

    return check


class _ConsumerCheck:
    """A consumer's readiness check: served at ``/readyz/consumers``, never at ``/readyz``."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: Any):
        self.consumer = consumer

    def __call__(self) -> None:
        if not self.consumer.ready.is_set():
            raise RuntimeError("consumer has no partition assignment yet")
        why = self.consumer.stalled()
        if why is not None:
            raise RuntimeError(f"consumer stalled: {why}")


def consumer_ready(consumer: Any) -> ReadinessCheck:
    """A consumption check that passes once ``consumer`` (a ConsumerRuntime or ConsumerGroup)
    has a partition assignment and while its loop is not stalled (``stalled()``: one step
    stuck longer than ``ConsumerSettings.stall_after_s``); ``/readyz/consumers`` answers 503
    otherwise. :meth:`ServiceBuilder.ready` files it under consumption: a consumer behind or
    without Kafka never takes the service's command API out of rotation."""
    return _ConsumerCheck(consumer)


#: Attributes :meth:`ServiceBuilder.start` sets: reading one before it is a ConfigError.
_STARTED_PARTS = frozenset({"settings", "clock", "edge", "catalog", "codec", "pool", "request_pool", "outbox"})


class ServiceBuilder(Generic[S]):
    """Compose one service process (see the module docstring).

    The constructor only records configuration (no I/O); :meth:`start` does the start-up
    work; the declarations (:meth:`consumer`, :meth:`projection`, ...) follow, then
    :meth:`build`. Production and tests compose services this one way: a test passes the
    parts it has (a settings object, ``catalog``, ``codec``, ``pool``, ``edge``), and
    :meth:`start` prepares only the missing ones.

    Args:
        spec: the service's :class:`ServiceSpec` (name, settings class, ``outbox``,
            consumers, projections, migrations folder).
        settings: its settings; None: :meth:`start` reads ``spec.settings_class()`` from the
            environment.
        schemas: the schemas folder(s) of its catalog (other teams' and its own, merged);
            not read when ``catalog`` is given.
        migrations: the service's migrations folder (``*.sql``, applied in name order after
            the outbox DDL when the service has an outbox); default
            :meth:`ServiceSpec.migrations_folder`.
        outbox: whether its database has an outbox table (default ``spec.outbox``).
        catalog, codec, pool, edge: ready parts (tests): a given pool means the caller owns
            the database, so :meth:`start` then configures no logging, runs no production
            check and no migrations, and ``edge`` stays as given (None: no edge policy);
            given parts are not closed at shutdown.

    Attributes (after :meth:`start`):
        spec, name, settings, clock (:class:`~casestream.clock.SystemClock`), edge, catalog,
        codec, pool, request_pool (``DeadlinePool(pool)``: for HTTP request paths),
        outbox (:class:`~casestream.outbox.OutboxWriter` over the codec).
    """

    def __init__(self, spec: ServiceSpec, settings: S | None = None, *,
                 schemas: Path | Sequence[Path] = (), migrations: Path | None = None,
                 outbox: bool | None = None, catalog: Catalog | None = None, codec: Any = None,
                 pool: Any = None, edge: EdgePolicy | None = None):
        self.spec = spec
        self.name = spec.name
        self.schemas: tuple[Path, ...] = ((Path(schemas),) if isinstance(schemas, (str, Path))
                                          else tuple(Path(f) for f in schemas))
        self.migrations = migrations
        self._with_outbox: bool = spec.outbox if outbox is None else outbox
        self._given: dict[str, Any] = {"settings": settings, "catalog": catalog, "codec": codec,
                                       "pool": pool, "edge": edge}
        self._started = False
        self._closers: list[Callable[[], None]] = []
        self._workers: dict[str, Worker] = {}
        self._readiness: dict[str, ReadinessCheck] = {}
        self._consumption: dict[str, ReadinessCheck] = {}
        self._consumers: list[tuple[str, int]] = []  # (consumer name, members holding a connection)
        self._projections: list[str] = []
        self._inboxes: dict[str, tuple[tuple[str, ...], bool]] = {}  # name -> (topics, compact guards)
        self._first_consumer: ConsumerRuntime | ConsumerGroup | None = None

    def __getattr__(self, name: str) -> Any:  # only for attributes not set yet
        if name in _STARTED_PARTS:
            raise ConfigError(f"ServiceBuilder.{name} of service {self.spec.name}: call start() first")
        raise AttributeError(name)

    @classmethod
    def from_parts(cls, spec: ServiceSpec, settings: S, *, catalog: Catalog, codec: Any, pool: Any,
                   edge: EdgePolicy | None = None) -> ServiceBuilder[S]:
        """``ServiceBuilder(spec, settings, catalog=..., codec=..., pool=..., edge=...).start()``:
        a started builder over ready parts (tests compose consumers and processes over fakes)."""
        return cls(spec, settings, catalog=catalog, codec=codec, pool=pool, edge=edge).start()

    def start(self) -> ServiceBuilder[S]:
        """Do the start-up work, in order, for the parts not given: settings, logging, the
        production check (``CASESTREAM_ENV=production``: :meth:`CommonSettings.production_problems`),
        edge policy, migrations (when ``MIGRATE_AT_START``), catalog, codec (registering
        schemas when ``CASESTREAM_AUTO_REGISTER_SCHEMAS``, else looking ids up), connection
        pool (``pool_size``/``pool_min``/``pool_timeout_s``). Returns the builder; a second
        call does nothing.

        Raises:
            ConfigError: invalid settings, unusable bearer key, missing migrations, unreachable
                PostgreSQL (one line each).
            CatalogError, SchemaError, UpcasterChainError, RegistryUnavailable: the catalog or
                codec cannot be prepared.
        """
        if self._started:
            return self
        given = self._given
        s: S = given["settings"] if given["settings"] is not None else read_settings(
            self.spec.settings_class(), self.name)
        self.settings = s
        self.clock = SystemClock()
        own_pool = given["pool"] is None
        if own_pool:
            configure_logging(self.name, s.log_level)
            s.require_production_ready(self.name)
            self.edge = edge_policy(s, self.name) if given["edge"] is None else given["edge"]
            if s.migrate_at_start:
                folder = self.migrations if self.migrations is not None else self.spec.migrations_folder()
                _migrate(s.dsn, service_migrations(folder, outbox=self._with_outbox), service=self.name)
        else:
            self.edge = given["edge"]
        self.catalog = given["catalog"] if given["catalog"] is not None else load_catalog(*self.schemas)
        self.codec = given["codec"] if given["codec"] is not None else open_codec(
            self.catalog, s.schema_registry(), auto_register=s.auto_register_schemas)
        closers: list[Callable[[], None]] = [] if given["codec"] is not None else [self.codec.close]
        if own_pool:
            try:
                pool: Any = ProcessPool(
                    s.dsn, min_size=min(s.pool_min, s.pool_size), max_size=s.pool_size,
                    timeout=s.pool_timeout_s, open=True, name=self.name,
                    # no server-side prepared statements: they do not survive a transaction
                    # pooler (PgBouncer pool_mode=transaction) between two transactions
                    kwargs={"application_name": self.name, "prepare_threshold": None})
            except BaseException:
                for close in closers:
                    close()
                raise
            closers.append(pool.close)
        else:
            pool = given["pool"]
        self.pool = pool
        self._closers.extend(closers)
        self.request_pool = DeadlinePool(pool)  # request paths: never wait past the deadline
        self.outbox = OutboxWriter(self.codec)
        self._started = True
        return self

    # -- declarations --------------------------------------------------------------------
    def event_types_on(self, topics: Sequence[str]) -> list[str]:
        """The catalog's event types published on any of ``topics`` (catalog order)."""
        return [t for t in self.catalog.event_types if self.catalog.subject_for(t).topic in topics]

    def consumer(self, name: str, topics: Sequence[str], registry: HandlerRegistry, *,
                 emits: bool = False, batch_size: int | None = None,
                 worker: str | None = None, pipeline: bool = True) -> ConsumerRuntime | ConsumerGroup:
        """Run consumer ``name`` (= Kafka group id) on ``topics`` with ``registry``'s handlers.

        Every catalog event type on ``topics`` the registry neither handles nor ignores is
        declared ignored. ``emits``: handlers append events through ``ctx.outbox``.
        ``batch_size``: events per transaction (None: ``settings.consumer_batch_size``).
        ``pipeline`` (default on): run handlers in psycopg pipeline mode on the fast path
        (``ConsumerSettings.pipeline_handlers``): a per-event statement costs 15-36 µs of
        client CPU instead of a ~200 µs round trip (bench/README.md, ``bench/statements.py``),
        but a handler reads results only through ``RETURNING`` + ``fetchone()``
        (``cursor.rowcount`` is -1 until the sync); pass False for handlers written otherwise.
        With ``CASESTREAM_CONSUMER_CONCURRENCY`` > 1, a :class:`ConsumerGroup` of that many
        members. Worker name ``worker``, default ``"consumer"`` for the first consumer and
        ``name`` for the others; its assignment is the ``name`` check of ``/readyz/consumers``.

        Raises:
            ConfigError: ``topics`` differ from the spec's ``subscriptions[name]`` (what the
                event catalog shows); see :class:`~casestream.consumer.runtime.ConsumerRuntime`.
        """
        declared = self.spec.subscriptions.get(name)
        if declared is not None and set(declared) != set(topics):
            raise ConfigError(f"consumer {name} reads {', '.join(topics)} but ServiceSpec "
                              f"{self.spec.name}.subscriptions declares {', '.join(declared)}")
        registry.ignore(*(t for t in self.event_types_on(topics) if not registry.knows(t)))
        s = self.settings
        batching = ConsumerSettings(batch_size=s.consumer_batch_size if batch_size is None else batch_size,
                                    pipeline_handlers=pipeline,
                                    rejoin_timeout_s=s.consumer_rejoin_timeout_s,
                                    group_protocol=s.kafka_group_protocol,
                                    shutdown_grace_s=s.shutdown_grace_s)
        config = s.consumer_config()
        # the build in the client id: the broker's group view says which build each member runs
        config["client.id"] = consumer_client_id(str(config.get("client.id") or name), s.build)
        args = (tuple(topics), registry, self.codec, self.pool, config, batching)
        outbox = self.outbox if emits else None
        runtime: ConsumerRuntime | ConsumerGroup
        if s.consumer_concurrency > 1:
            runtime = ConsumerGroup(s.consumer_concurrency, name, *args, outbox=outbox)
        else:
            runtime = ConsumerRuntime(name, *args, outbox=outbox)
        self._consumers.append((name, s.consumer_concurrency))
        self._inboxes[name] = (tuple(topics), batching.first_seen is FirstSeenPolicy.BASELINE)
        if self._first_consumer is None:
            self._first_consumer = runtime
        self._consumption[name] = consumer_ready(runtime)
        self.worker(worker or ("consumer" if len(self._consumers) == 1 else name), runtime.run)
        return runtime

    def projection(self, spec: ProjectionSpec, *, batch_size: int = PROJECTION_BATCH_SIZE,
                   worker: str | None = None, pipeline: bool = True) -> ConsumerRuntime | ConsumerGroup:
        """Maintain the live tables of ``spec`` (a :class:`casestream.handlers.ProjectionSpec`):
        create them if missing, and run its live consumer (``spec.live_consumer`` on
        ``spec.topics``, ``batch_size`` events per transaction; worker name default: the
        projection name's last part, e.g. ``statistics``; ``pipeline``: as for :meth:`consumer`)."""
        names = spec.live_names()
        self._projections.append(spec.name)
        with self.pool.connection() as conn:
            spec.create_tables(conn, names)
        return self.consumer(spec.live_consumer, spec.topics,
                             spec.registry(names, self.catalog.event_types), batch_size=batch_size,
                             worker=worker or spec.name.rpartition(".")[2], pipeline=pipeline)

    def relay(self, *, worker: str = "relay", settings: RelaySettings | None = None,
              producer: Mapping[str, Any] | None = None) -> OutboxRelay | CdcRetention:
        """Run the publisher of the service's outbox: the outbox relay (name and Kafka client
        id ``<service>.relay``), or, with ``OUTBOX_PUBLISHER=cdc``, no relay but the
        :class:`~casestream.outbox.cdc.CdcRetention` job of slot ``CDC_SLOT`` (Debezium
        publishes; the job checkpoints, exports ``outbox_cdc_*`` and deletes rows CDC passed
        more than ``RELAY_RETENTION_S`` ago).

        ``settings`` default: from the service settings (``RELAY_BATCH_SIZE``,
        ``RELAY_MAX_ATTEMPTS``, ``RELAY_RETENTION_S``); ``producer``: librdkafka properties
        laid over ``RELAY_PRODUCER``.

        Raises:
            ConfigError: a producer property is unknown, invalid or weakens the guarantees.
        """
        s = self.settings
        if s.outbox_publisher == "cdc":
            dsn = s.dsn
            retention = CdcRetention(lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=10),
                                     s.cdc_slot or default_slot_name(s.database),
                                     interval_s=s.cdc_retention_interval_s, keep_s=s.relay_retention_s)
            self.worker(worker, retention.run)
            return retention
        name = f"{self.name}.relay"
        if settings is None:
            settings = RelaySettings(batch_size=s.relay_batch_size, retry=relay_retry(s.relay_max_attempts),
                                     published_retention_s=s.relay_retention_s)
        overrides = {**s.kafka_properties, **s.relay_producer, **(producer or {})}
        relay = OutboxRelay(self.pool, producer_config(s.kafka_bootstrap, client_id=name, overrides=overrides),
                            settings, name=name)
        self.worker(worker, relay.run)
        return relay

    def worker(self, name: str, worker: Worker) -> None:
        """Run ``worker`` (``fn(stop: threading.Event)``) as ``name``.

        Raises:
            ConfigError: a worker of that name is declared already.
        """
        if name in self._workers:
            raise ConfigError(f"{self.name}: worker {name!r} declared twice")
        self._workers[name] = worker

    def ready(self, name: str, check: ReadinessCheck, *, consumption: bool | None = None) -> None:
        """Add (or replace) check ``name``: of ``/readyz`` (can the service take commands), or
        with ``consumption`` of ``/readyz/consumers``. Default: a :func:`consumer_ready`
        check is a consumption check, any other a readiness check."""
        if consumption is None:
            consumption = isinstance(check, _ConsumerCheck)
        target, other = ((self._consumption, self._readiness) if consumption
                         else (self._readiness, self._consumption))
        other.pop(name, None)
        target[name] = check

    def closer(self, close: Callable[[], None]) -> None:
        """Call ``close`` at shutdown, before the codec and the pool are closed."""
        self._closers.insert(0, close)

    # -- the process ---------------------------------------------------------------------
    def _check_spec(self) -> None:
        """Refuse a bootstrap that disagrees with its spec: a consumer or projection the spec
        does not list, or (when it declares any consumer) a spec consumer it never declares.
        A process that declares no consumer at all (consumers switched off by a setting) is
        not checked for missing ones."""
        spec, declared = self.spec, [name for name, _ in self._consumers]
        for name in declared:
            if name not in spec.consumers:
                raise ConfigError(f"{self.name}: consumer {name} is declared but not in ServiceSpec "
                                  f"{spec.name}.consumers ({', '.join(spec.consumers) or 'none'})")
        for name in self._projections:
            if name not in spec.projections:
                raise ConfigError(f"{self.name}: projection {name} is declared but not in ServiceSpec "
                                  f"{spec.name}.projections ({', '.join(spec.projections) or 'none'})")
        missing = [name for name in spec.consumers if name not in declared]
        if declared and missing:
            raise ConfigError(f"{self.name}: ServiceSpec {spec.name}.consumers lists {', '.join(missing)} "
                              f"but the bootstrap never declares it (consumer() or projection())")

    def _check_pool(self) -> None:
        """With more than one member per consumer, refuse a pool the consumers would leave
        without a free connection (readiness checks and HTTP reads would then time out)."""
        total = 0
        max_size = getattr(self.pool, "max_size", None)
        if not isinstance(max_size, int):  # a test double without a size: nothing to check
            return
        for consumer, members in self._consumers:
            total += members
            if members > 1 and total >= max_size:
                raise ConfigError(
                    f"CASESTREAM_CONSUMER_CONCURRENCY={members}: the consumers of this service hold "
                    f"{total} of its pool's {max_size} connections ({consumer} included), leaving none "
                    f"for readiness checks and requests; raise the service's pool size above {total} "
                    f"or lower the concurrency")

    def build(self, *, app: Any, ready_table: str, kafka: bool | None = None) -> ServiceProcess:
        """The service process: ``app`` (its Starlette app; health routes are added) and the
        declared workers (and ``inbox-retention``, :class:`~casestream.consumer.retention.InboxRetention`
        of the declared consumers every ``INBOX_RETENTION_INTERVAL_S``; and ``dead-letter-depth``,
        :class:`~casestream.operations.DeadLetterDepth` every ``DEAD_LETTER_DEPTH_INTERVAL_S``;
        and ``redrive-after-deploy``, :class:`~casestream.operations.AfterDeployRedrives` as
        often), with readiness (``/readyz``, can it take commands)
        ``postgres`` (reads ``ready_table``) and ``outbox`` (writable, when the service has
        one) and the declared readiness checks; consumption (``/readyz/consumers``) ``kafka``
        (when ``kafka``; default: a consumer or the relay runs), ``registry`` and one check
        per consumer (its name: assigned, not stalled) and the declared ones; closers: the
        declared ones, then codec and pool. Freezes the start-up objects
        (``CASESTREAM_GC_FREEZE``).

        Raises:
            ConfigError: the consumers would hold the whole pool (names
                CASESTREAM_CONSUMER_CONCURRENCY and the pool size); the declared consumers or
                projections differ from the spec's (:meth:`_check_spec`).
        """
        self.start()
        self._check_spec()
        self._check_pool()
        s = self.settings
        if self._inboxes and s.inbox_retention_interval_s > 0 and "inbox-retention" not in self._workers:
            dsn = getattr(self.pool, "conninfo", None) or s.dsn
            retention = InboxRetention(str(dsn), s.kafka_client(), self._inboxes, RetentionSettings(
                interval_s=s.inbox_retention_interval_s, min_age_s=s.inbox_dedup_window_s))
            self.worker("inbox-retention", retention.run)
        if self._consumers and s.dead_letter_depth_interval_s > 0 and "dead-letter-depth" not in self._workers:
            depth = DeadLetterDepth(s.kafka_client(), [name for name, _ in self._consumers],
                                    interval_s=s.dead_letter_depth_interval_s)
            self.worker("dead-letter-depth", depth.run)
        if self._consumers and s.dead_letter_depth_interval_s > 0 and "redrive-after-deploy" not in self._workers:
            after_deploy = AfterDeployRedrives(s.kafka_client(), [name for name, _ in self._consumers],
                                               interval_s=s.dead_letter_depth_interval_s)
            self.worker("redrive-after-deploy", after_deploy.run)
        checks = dependency_checks(s.kafka_client(), s.registry_url,
                                   registry_properties=s.registry_properties)
        uses_kafka = (bool(self._consumers) or "relay" in self._workers) if kafka is None else kafka
        readiness: dict[str, ReadinessCheck] = {"postgres": _database_ready(self.pool, ready_table)}
        if self._with_outbox:
            readiness["outbox"] = _outbox_writable(self.pool)
        readiness.update(self._readiness)
        # The codec looked its own events' schema ids up at start, so commands need neither
        # Kafka nor the registry; consumers need both (the registry: ids on the wire).
        consumption: dict[str, ReadinessCheck] = {"kafka": checks["kafka"]} if uses_kafka else {}
        consumption["registry"] = checks["registry"]
        consumption.update(self._consumption)
        freeze_startup_objects(s.gc_freeze)
        return ServiceProcess(name=self.name, app=app, host=s.host, port=s.port,
                              workers=dict(self._workers), readiness=readiness,
                              consumption=consumption, closers=list(self._closers),
                              # the consumers' grace, then leaving the group, the relay's flush
                              shutdown_timeout_s=s.shutdown_grace_s + 15.0)
