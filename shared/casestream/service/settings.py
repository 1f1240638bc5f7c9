"""Settings shared by every casestream service, read once from ``CASESTREAM_*`` variables.

Each service subclasses :class:`ServiceSettings` (CommonSettings plus the HTTP edge and
the service's database) in its own ``settings.py`` with its own prefix
(``CASESTREAM_CASE_``, ...; :func:`service_config`). Nothing else in the suite reads ``os.environ``:
settings objects are built once in a service's bootstrap and passed down.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import AliasChoices, AliasGenerator, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from casestream.auth.tokens import AuthSettings
from casestream.errors import ConfigError
from casestream.kafka.builds import BUILD_PATTERN
from casestream.kafka.config import check_client_properties
from casestream.kafka.properties import read_properties_file, read_secret_file
from casestream.service.properties import ClientPropertiesSource

#: Schema-registry client properties that authenticate the client.
_REGISTRY_CREDENTIALS = ("basic.auth.user.info", "bearer.auth.token", "bearer.auth.credentials.source",
                         "ssl.certificate.location")
#: libpq ``sslmode`` values that never fall back to plaintext.
_PG_ENCRYPTED = ("require", "verify-ca", "verify-full")
#: libpq parameters that authenticate a connection without a server-side ``trust`` rule.
_PG_CREDENTIALS = ("password", "passfile", "sslcert", "sslkey", "krbsrvname", "gssencmode")


class CommonSettings(BaseSettings):
    """Infrastructure endpoints every service needs.

    Environment variables (prefix ``CASESTREAM_``):
        KAFKA_BOOTSTRAP: Kafka ``bootstrap.servers``, e.g. ``127.0.0.1:19092``.
        REGISTRY_URL: Confluent-API schema registry base URL.
        PG_URL: PostgreSQL server URL (or libpq ``key=value`` string); a service sets its own
            ``dbname`` (:meth:`database_url`), every other parameter (``sslmode``...) is kept.
        AUTO_REGISTER_SCHEMAS: register schemas at start (development); production sets
            ``false`` and services only look ids up, failing at start if one is missing.
        LOG_LEVEL: Python logging level name.
        SMTP_HOST / SMTP_PORT: the SMTP server notices are sent through.
        KAFKA_SESSION_TIMEOUT_MS: consumers' ``session.timeout.ms`` (librdkafka default 45000):
            how long a crashed consumer keeps its partitions before the group rebalances.
            The broker bounds it (``group.min.session.timeout.ms``, 6000 by default).
        KAFKA_GROUP_PROTOCOL: ``classic`` (default, any broker; eager assignors unless
            ``KAFKA_PROP_PARTITION_ASSIGNMENT_STRATEGY=cooperative-sticky``) or
            ``consumer`` (KIP-848, Kafka >= 4.0 brokers): ``ConsumerSettings.group_protocol``.
            With ``consumer`` the session timeout is the broker's
            ``group.consumer.session.timeout.ms`` and KAFKA_SESSION_TIMEOUT_MS is not sent.
        INSTANCE_ID: a stable identity of this instance (the StatefulSet pod name, the dev
            stack's replica index): consumers join as static members (``group.instance.id``,
            KIP-345), so a restart within the session timeout does not rebalance. Unset
            (default): dynamic membership. Two running instances must never share it: the
            second one fences the first, which stops (``ConsumerFenced``).
        BUILD: this deployment's build (an image tag, a commit; the chart sets the image
            tag): every consumer's Kafka client id is ``<consumer>@<build>``
            (:mod:`casestream.kafka.builds`), so the broker tells which build each group member
            runs and a "re-drive after deploy" (:mod:`casestream.operations.afterdeploy`) waits
            for members of another build. Unset: no build, and such a request is refused.
        CONSUMER_REJOIN_TIMEOUT_S: seconds a consumer waits for a partition assignment after
            subscribing or losing its partitions before it replaces its Kafka client
            (``ConsumerSettings.rejoin_timeout_s``; default ``max.poll.interval.ms +
            session.timeout.ms``).
        CONSUMER_CONCURRENCY: members of each consumer group a service process runs (default
            1). Above 1 the partitions are consumed in parallel by a
            :class:`~casestream.consumer.group.ConsumerGroup`, one pooled connection per
            member and consumer (case and decision run two consumers); a service whose
            consumers would hold its whole pool refuses to start (ConfigError).
        WORKERS: worker processes of this instance (default 1: the process serves alone).
            Above 1 a supervisor holds the HTTP socket and forks that many workers, each
            building the whole service (pool, consumers, relay) after the fork: each is a
            consumer group member and a relay shard holder; see
            :mod:`casestream.service.workers`. With INSTANCE_ID, worker ``i`` joins as
            ``<INSTANCE_ID>-w<i>``.
        GC_FREEZE: move the objects alive after start-up out of the garbage collector's
            reach (``gc.freeze``, default true): a full collection then skips them, see
            :mod:`casestream.service.gctune`.
        ENV: ``development`` (default) or ``production``: in production a service refuses to
            start with the public development JWT key (from any source, trimmed or not), an
            HS256 key under 32 bytes, schema auto-registration, a PostgreSQL URL that carries
            no credential, or a transport that is not encrypted and authenticated
            (:meth:`production_problems`).
        TRANSPORT_SECURITY: ``tls`` (default): in production every client connection must
            be encrypted and authenticated by the client itself — Kafka
            ``security.protocol`` ``SASL_SSL`` or ``SSL``, an ``https`` registry with
            credentials, PostgreSQL ``sslmode`` ``require``/``verify-ca``/``verify-full``,
            an ``https`` JWKS URL. ``mesh``: the network layer (a service mesh with mutual
            TLS) encrypts and authenticates every connection, so plaintext clients are
            accepted in production; nothing else is relaxed.
        KAFKA_PROPERTIES_FILE: a properties file (``key=value`` lines, librdkafka names) of
            client properties every Kafka client of the process uses: ``security.protocol``,
            ``sasl.*``, ``ssl.*`` (TLS, SASL PLAIN / SCRAM / OAUTHBEARER). Mount it from a
            secret store.
        KAFKA_PROP_<NAME>: one such property (``CASESTREAM_KAFKA_PROP_SASL_MECHANISM``);
            ``..._<NAME>_FILE`` reads the value from a file (:mod:`casestream.service.properties`).
            Wins over the file. Refused: ``bootstrap.servers`` (KAFKA_BOOTSTRAP), ``group.id``,
            ``enable.auto.commit``, ``enable.auto.offset.store``, ``enable.idempotence``, ``acks``.
        REGISTRY_PROPERTIES_FILE / REGISTRY_PROP_<NAME>: the same for the schema-registry
            client (``confluent_kafka.schema_registry.SchemaRegistryClient`` properties:
            ``basic.auth.user.info``, ``bearer.auth.credentials.source``/``bearer.auth.token``,
            ``ssl.ca.location``, ``ssl.certificate.location``/``ssl.key.location``).
        PG_PASSWORD_FILE: a file holding the PostgreSQL password (used as libpq ``password``,
            winning over one in PG_URL).
        MIGRATE_AT_START: apply the service's migrations at start (default true); false when
            the deployment runs ``casestream migrate`` before the services (a Kubernetes Job,
            the compose ``migrate`` service).
    """

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore")

    kafka_bootstrap: str = Field("127.0.0.1:19092", description="Kafka `bootstrap.servers`")
    registry_url: str = Field("http://127.0.0.1:18081/apis/ccompat/v7",
                              description="Confluent-API schema registry base URL")
    pg_url: str = Field("postgresql://postgres@127.0.0.1:15432",
                        description="PostgreSQL server URL or libpq key=value string; each "
                                    "service sets its own dbname, every other parameter is kept")
    auto_register_schemas: bool = Field(
        True, description="register schemas at start (development); `false` in production: ids "
                          "are looked up, never registered")
    log_level: str = Field("INFO", description="Python logging level name")
    smtp_host: str = Field("127.0.0.1", description="SMTP server notices are sent through (notification)")
    smtp_port: int = Field(12525, description="port of that SMTP server")
    kafka_session_timeout_ms: int = Field(
        45000, description="consumers' `session.timeout.ms`: how long a crashed consumer keeps "
                           "its partitions")
    kafka_group_protocol: Literal["classic", "consumer"] = Field(
        "classic", description="consumer group protocol: classic (eager, or cooperative-sticky "
                               "through the assignment strategy property) or "
                               "consumer (KIP-848, Kafka >= 4.0)")
    instance_id: str | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$",
        description="stable instance identity: consumers join as static members "
                    "(group.instance.id)")
    build: str | None = Field(
        None, pattern=BUILD_PATTERN,
        description="this deployment's build (an image tag, a commit): consumers carry it in "
                    "their Kafka client id (<consumer>@<build>), which is how a re-drive after "
                    "deploy sees a new deploy")
    consumer_rejoin_timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="seconds a consumer waits for a partition assignment after "
                                "subscribing or losing its partitions before it replaces its "
                                "Kafka client (default: max.poll.interval.ms + "
                                "session.timeout.ms)")
    shutdown_grace_s: float = Field(
        15.0, gt=0, le=600, allow_inf_nan=False,
        description="seconds a consumer's batch in flight may still run after SIGTERM; past it "
                    "its transaction is rolled back and the batch redelivered (the process's "
                    "stop budget is this + 15 s; keep terminationGracePeriodSeconds above "
                    "this + 25 s)")
    consumer_concurrency: int = Field(
        1, ge=1, le=64, description="group members per consumer and process (one pooled connection "
                                    "each; a service whose consumers would hold its whole pool "
                                    "refuses to start)")
    workers: int = Field(
        1, ge=1, le=64, description="worker processes of this instance: a supervisor holds the HTTP "
                                    "port and forks them; each builds its own clients and is a "
                                    "consumer group member and relay shard holder")
    gc_freeze: bool = Field(True, description="freeze the objects alive after start-up (`gc.freeze`)")
    env: Literal["development", "production"] = Field(
        "development", description="`production` refuses the development JWT key (any source), "
                                   "an HS256 key under 32 bytes, schema auto-registration, a "
                                   "PostgreSQL URL without credentials and, unless "
                                   "CASESTREAM_TRANSPORT_SECURITY=mesh, any plaintext or "
                                   "unauthenticated transport")
    transport_security: Literal["tls", "mesh"] = Field(
        "tls", description="`tls`: in production every client connection (Kafka, registry, "
                           "PostgreSQL, JWKS) must use TLS and credentials; `mesh`: the network "
                           "layer (a service mesh with mutual TLS) provides both")
    kafka_properties_file: Path | None = Field(
        None, description="properties file of librdkafka client properties (security.protocol, "
                          "sasl.*, ssl.*) for every Kafka client")
    kafka_properties: dict[str, str] = Field(
        default_factory=dict, validate_default=True,
        description="librdkafka client properties: one CASESTREAM_KAFKA_PROP_<NAME> variable "
                    "each (<NAME>_FILE: the value read from a file), or this variable as a JSON "
                    "object; win over the properties file",
        json_schema_extra={"shown_default": "none"})
    registry_properties_file: Path | None = Field(
        None, description="properties file of schema-registry client properties "
                          "(basic.auth.user.info, bearer.auth.*, ssl.ca.location)")
    registry_properties: dict[str, str] = Field(
        default_factory=dict, validate_default=True,
        description="schema-registry client properties: CASESTREAM_REGISTRY_PROP_<NAME> "
                    "variables (<NAME>_FILE: from a file), or this variable as a JSON object; "
                    "win over the properties file",
        json_schema_extra={"shown_default": "none"})
    pg_password_file: Path | None = Field(
        None, description="file holding the PostgreSQL password (wins over one in PG_URL)")
    migrate_at_start: bool = Field(
        True, description="apply the service's migrations at start; `false` when a deployment "
                          "runs `casestream migrate` first (a migration job)")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Constructor arguments, then ``CASESTREAM_*_PROP_*`` variables, then the rest."""
        return (init_settings, ClientPropertiesSource(settings_cls), env_settings, dotenv_settings,
                file_secret_settings)

    @field_validator("kafka_properties", "registry_properties")
    @classmethod
    def _client_properties(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """The properties file of the kind (``<kind>_properties_file``) beneath the
        variables; Kafka's checked by librdkafka, the registry's URL kept in REGISTRY_URL."""
        kind = str(info.field_name).removesuffix("_properties")
        file = info.data.get(f"{kind}_properties_file")
        variable = f"CASESTREAM_{kind.upper()}_PROPERTIES_FILE"
        merged = {**(read_properties_file(file, variable=variable) if file else {}), **value}
        if kind == "kafka":
            check_client_properties(merged, source=f"CASESTREAM_KAFKA_PROP_* / {variable}")
        elif "url" in merged:
            raise ConfigError("CASESTREAM_REGISTRY_PROP_URL: set CASESTREAM_REGISTRY_URL instead")
        return merged

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if not isinstance(logging.getLevelName(value.upper()), int):
            raise ValueError("not a logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL)")
        return value.upper()

    @field_validator("pg_url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        # lazy (start-up cost): psycopg only when a DSN is parsed
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(value)
        except Exception as e:  # noqa: BLE001 - psycopg.ProgrammingError: not a connection string
            raise ValueError("not a PostgreSQL URL (postgresql://user@host:port): "
                             f"{str(e).strip()}") from None
        return value

    def kafka_client(self, bootstrap: str | None = None) -> dict[str, Any]:
        """The connection every Kafka client of the process uses: ``bootstrap.servers``
        (``bootstrap``, default KAFKA_BOOTSTRAP) and the client properties (properties file,
        then KAFKA_PROP_* variables): a :data:`casestream.kafka.KafkaTarget`."""
        return {**self.kafka_properties, "bootstrap.servers": bootstrap or self.kafka_bootstrap}

    def consumer_config(self) -> dict[str, object]:
        """librdkafka consumer settings common to every consumer runtime of a service:
        :meth:`kafka_client`, ``group.instance.id`` (INSTANCE_ID, when set) and, with the
        classic protocol, ``session.timeout.ms`` and ``heartbeat.interval.ms`` (a third of the
        session timeout, capped at 3000 ms, Kafka's default)."""
        static = {"group.instance.id": self.instance_id} if self.instance_id else {}
        if self.kafka_group_protocol == "consumer":  # the broker times sessions (KIP-848)
            return {**self.kafka_client(), **static}
        return {
            **self.kafka_client(),
            "session.timeout.ms": self.kafka_session_timeout_ms,
            "heartbeat.interval.ms": min(3000, self.kafka_session_timeout_ms // 3),
            **static,
        }

    def schema_registry(self, *, timeout: float = 10.0, max_retries: int = 2) -> Any:
        """A :class:`~casestream.events.registry.ConfluentSchemaRegistry` on REGISTRY_URL with
        the registry client properties (authentication, CA). The caller closes it.

        Raises:
            RegistryUnavailable: the URL or a property is refused by the client.
        """
        # lazy (start-up cost): the registry client loads only when a registry is opened
        from casestream.events.registry import ConfluentSchemaRegistry

        return ConfluentSchemaRegistry(self.registry_url, timeout=timeout, max_retries=max_retries,
                                       options=self.registry_properties)

    def database_url(self, database: str) -> str:
        """The libpq connection string of ``database`` on PG_URL: PG_URL's parameters (any
        of them: ``sslmode``, ``sslrootcert``, ``options``...) with ``dbname`` set, and
        ``password`` from PG_PASSWORD_FILE when set. Built with ``psycopg.conninfo.make_conninfo``,
        so the result is a ``key=value`` string, not a URL.

        Raises:
            ConfigError: ``database`` is empty, or PG_PASSWORD_FILE cannot be read.
        """
        if not database:
            raise ConfigError("database name is empty")
        # lazy (start-up cost): psycopg only when a DSN is built
        from psycopg.conninfo import make_conninfo

        extra = {"dbname": database}
        if self.pg_password_file is not None:
            extra["password"] = read_secret_file("CASESTREAM_PG_PASSWORD_FILE", str(self.pg_password_file))
        return make_conninfo(self.pg_url, **extra)

    def production_problems(self) -> list[str]:
        """Why these settings are unfit for ``CASESTREAM_ENV=production``, one line each
        naming the variable (empty outside production). The one policy of every process —
        services and the console (which lays its ``AuthSettings`` over these as ``auth``):

        - the bearer key (``self.auth`` when there is one:
          :meth:`~casestream.auth.tokens.AuthSettings.production_problems`): the public
          development key from any source, trimmed or not; an HS256 key under 32 bytes;
          a JWKS URL that is not https;
        - schema auto-registration;
        - a PostgreSQL URL without a credential (no ``password``, ``passfile``, client
          certificate or Kerberos/GSS: the server must be trusting every connection);
        - unless TRANSPORT_SECURITY is ``mesh``: Kafka ``security.protocol`` other than
          ``SASL_SSL``/``SSL``, a registry URL that is not https or a registry without
          credentials, a PostgreSQL ``sslmode`` below ``require`` (libpq's default
          ``prefer`` falls back to plaintext).
        """
        if self.env != "production":
            return []
        transport = self.transport_security == "tls"
        problems = []
        auth = getattr(self, "auth", None)
        if auth is not None:
            problems.extend(auth.production_problems(transport=transport))
        if transport:
            problems.extend(self._transport_problems())
        if self.auto_register_schemas:
            problems.append("CASESTREAM_AUTO_REGISTER_SCHEMAS is true: register schemas in the "
                            "deployment pipeline (casestream schemas register) and set it to false")
        if not pg_has_credential(self.pg_url) and self.pg_password_file is None:
            problems.append("CASESTREAM_PG_URL carries no credential (password, passfile, sslcert, "
                            "GSS): set CASESTREAM_PG_PASSWORD_FILE or a passfile; trust "
                            "authentication is for local development")
        return problems

    def _transport_problems(self) -> list[str]:
        """Kafka, registry and PostgreSQL connections that are not encrypted and
        authenticated by the client (see :meth:`production_problems`)."""
        # lazy (start-up cost): psycopg only when a DSN is parsed
        from psycopg.conninfo import conninfo_to_dict

        problems = []
        protocol = self.kafka_properties.get("security.protocol", "PLAINTEXT")
        if protocol.upper() not in ("SASL_SSL", "SSL"):
            problems.append(f"CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL is {protocol.upper()}: "
                            "set SASL_SSL or SSL (or CASESTREAM_TRANSPORT_SECURITY=mesh)")
        if not self.registry_url.lower().startswith("https://"):
            problems.append(f"CASESTREAM_REGISTRY_URL is {self.registry_url}: use https "
                            "(or CASESTREAM_TRANSPORT_SECURITY=mesh)")
        if not any(self.registry_properties.get(k) for k in _REGISTRY_CREDENTIALS):
            problems.append("CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO is not set: give the "
                            "registry client credentials (basic.auth.user.info, bearer.auth.*, "
                            "or a client certificate ssl.certificate.location)")
        sslmode = conninfo_to_dict(self.pg_url).get("sslmode") or "prefer"
        if sslmode not in _PG_ENCRYPTED:
            problems.append(f"CASESTREAM_PG_URL has sslmode={sslmode}: set sslmode=require, "
                            "verify-ca or verify-full (or CASESTREAM_TRANSPORT_SECURITY=mesh)")
        return problems

    def require_production_ready(self, service: str) -> None:
        """Raise unless :meth:`production_problems` is empty.

        Raises:
            ConfigError: ``<service>: CASESTREAM_ENV=production refuses: ...``, one line each.
        """
        problems = self.production_problems()
        if problems:
            raise ConfigError(f"{service}: CASESTREAM_ENV=production refuses these settings:\n  "
                              + "\n  ".join(problems))


def pg_has_credential(url: str) -> bool:
    """Whether libpq connection string/URL ``url`` names a credential (``password``,
    ``passfile``, a client certificate, Kerberos/GSS) rather than relying on ``trust``."""
    # lazy (start-up cost): psycopg only when a DSN is parsed
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    return any(params.get(k) for k in _PG_CREDENTIALS)


def shown_conninfo(dsn: str) -> str:
    """``dsn`` for messages and logs: the password replaced by ``***``."""
    # lazy (start-up cost): psycopg only when a DSN is parsed
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - psycopg.ProgrammingError: shown as is, it failed already
        return "<unparseable connection string>"
    if params.get("password"):
        params["password"] = "***"
    return make_conninfo("", **params)


def _service_alias(prefix: str) -> AliasGenerator:
    """Read each field of a service's settings from ``<prefix><FIELD>``; CommonSettings'
    fields keep their ``CASESTREAM_<FIELD>`` name (the generator leaves them unaliased)."""

    def alias(name: str) -> AliasChoices | None:
        return None if name in CommonSettings.model_fields else AliasChoices(prefix + name.upper())

    return AliasGenerator(validation_alias=alias)


def service_config(prefix: str) -> SettingsConfigDict:
    """The ``model_config`` of a service's settings class, e.g. ``"CASESTREAM_SAGA_"``.

    Every field the service declares, and those of :class:`ServiceSettings`, is read only
    from ``<prefix><FIELD>``: never ``CASESTREAM_PORT`` & co., and in code it is passed by
    variable name (``DecisionSettings(CASESTREAM_DECISION_PORT=0)``). CommonSettings'
    fields keep their ``CASESTREAM_<FIELD>`` variables.
    """
    return SettingsConfigDict(env_prefix="CASESTREAM_", frozen=True, extra="ignore",
                              alias_generator=_service_alias(prefix))


class ServiceSettings(CommonSettings):
    """The HTTP edge every service runs, and its own database; subclass it per service with
    ``model_config = service_config("CASESTREAM_<SERVICE>_")`` and declare ``database``
    (and ``port``: defaults and bounds differ per service).

    Environment variables (``<prefix>`` = the service's, e.g. ``CASESTREAM_AUDIT_``):
        <prefix>HOST: HTTP listen address (default ``127.0.0.1``).
        <prefix>MAX_IN_FLIGHT: requests in flight before shedding with 503 (>= 1, default 32).
        <prefix>RATE_TENANT_PER_S / _RATE_TENANT_BURST: per-tenant token bucket, requests
            per second (> 0) / bucket size (>= 1) (default 400/s, 800).
        <prefix>RATE_CLIENT_PER_S / _RATE_CLIENT_BURST: per-client token bucket (100/s, 200).
        <prefix>REQUEST_DEADLINE_S: budget of a request's database calls, seconds (> 0,
            default 5).
        <prefix>MAX_BODY_BYTES / _BODY_TIMEOUT_S: request body limit, bytes (larger: 413;
            default 65536) / time the whole body may take to arrive, seconds (then 408;
            default 10); the body is read before the request takes an in-flight slot.
        <prefix>POOL_SIZE / _POOL_MIN / _POOL_TIMEOUT_S: the PostgreSQL pool (most and kept
            connections, wait for one in seconds); the one pool size name of every service.
        <prefix>CONSUMER_BATCH_SIZE: events per consumer transaction of the service's
            consumers (projections use their own).
        <prefix>RELAY_PRODUCER: librdkafka producer properties of the service's outbox relay
            as a JSON object, e.g. ``{"linger.ms": 5, "compression.type": "zstd"}``
            (``enable.idempotence``/``acks=all`` cannot be weakened; an unknown property
            stops the service at start with its name).
        <prefix>RELAY_MAX_ATTEMPTS: attempts per outbox row after retryable delivery errors
            before it is marked ``failed`` (>= 1, default 10, the relay's
            ``DEFAULT_MAX_ATTEMPTS``; metric ``relay_gave_up_total``).
        <prefix>RELAY_BATCH_SIZE: outbox rows per relay batch (>= 1, default 1000).
        <prefix>RELAY_RETENTION_S: published outbox rows are kept this long, seconds (>= 0,
            default 3600; 0 deletes a row once its delivery is confirmed).
        <prefix>OUTBOX_PUBLISHER: ``relay`` (default: the service runs the outbox relay) or
            ``cdc`` (Debezium publishes the outbox: no relay; a CDC retention job checkpoints,
            reports ``outbox_cdc_*`` metrics and deletes rows CDC passed more than
            ``RELAY_RETENTION_S`` ago). Switch a running system with
            ``casestream outbox handover``, then restart with the new value.
        <prefix>CDC_SLOT: the connector's replication slot (default
            ``casestream_<database>_outbox``, ``casestream.outbox.cdc.default_slot_name``).
        <prefix>CDC_RETENTION_INTERVAL_S: how often the CDC retention job runs, seconds (default 5).
        <prefix>INBOX_RETENTION_INTERVAL_S: how often the inbox retention job purges the
            consumers' inbox rows no redelivery can need, seconds (default 600; 0: never;
            ``casestream.consumer.retention``).
        <prefix>INBOX_DEDUP_WINDOW_S: inbox rows younger than this are always kept, seconds
            (default 604800 = 7 days).
        <prefix>AUTH: bearer-token settings as JSON; normally left unset, so that
            ``casestream.auth.tokens.AuthSettings`` reads ``CASESTREAM_AUTH_*`` itself.

    A class used without ``service_config`` reads these without a service prefix, which no
    service wants, so it is a base only.
    """

    database: str = Field(description="database name on CASESTREAM_PG_URL")
    host: str = Field("127.0.0.1", description="HTTP listen address")
    max_in_flight: int = Field(32, ge=1, description="HTTP requests in flight before shedding with 503")
    rate_tenant_per_s: float = Field(400.0, gt=0, description="per-tenant token bucket, requests per second")
    rate_tenant_burst: int = Field(800, ge=1, description="per-tenant token bucket size")
    rate_client_per_s: float = Field(100.0, gt=0, description="per-client token bucket, requests per second")
    rate_client_burst: int = Field(200, ge=1, description="per-client token bucket size")
    request_deadline_s: float = Field(5.0, gt=0, description="budget of a request's database calls, seconds")
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                description="request body limit, bytes (larger: 413)")
    body_timeout_s: float = Field(10.0, gt=0, le=300, description="time a request body may take to arrive, seconds (then 408)")
    pool_size: int = Field(10, ge=2, description="PostgreSQL pool size (most connections)")
    pool_min: int = Field(2, ge=1, description="connections the pool keeps open")
    pool_timeout_s: float = Field(30.0, gt=0, description="wait for a pooled connection, seconds")
    consumer_batch_size: int = Field(200, ge=1, description="events per consumer transaction")
    relay_producer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="librdkafka producer properties of the outbox relay, as "
                                          "JSON (`enable.idempotence`/`acks` cannot be weakened)")
    relay_max_attempts: int = Field(10, ge=1, description="attempts per outbox row after retryable "
                                                          "delivery errors before it is marked failed")
    relay_batch_size: int = Field(1000, ge=1, description="outbox rows per relay batch")
    relay_retention_s: float = Field(3600.0, ge=0, description="keep published outbox rows this long, "
                                                               "seconds (0: delete once delivered)")
    outbox_publisher: Literal["relay", "cdc"] = Field(
        "relay", description="who publishes the outbox: relay (run it) or cdc (Debezium; no relay)")
    cdc_slot: str = Field("", description="replication slot of the outbox connector "
                                          "(empty: casestream_<database>_outbox)")
    cdc_retention_interval_s: float = Field(5.0, gt=0, description="how often the CDC retention job "
                                                                   "checkpoints and deletes, seconds")
    inbox_retention_interval_s: float = Field(
        600.0, ge=0, description="how often inbox rows no redelivery can need are purged, seconds (0: never)")
    inbox_dedup_window_s: float = Field(
        7 * 86400.0, ge=0, description="inbox rows younger than this are always kept, seconds")
    dead_letter_depth_interval_s: float = Field(
        30.0, ge=0, description="how often the open dead-letter depth of each consumer is read "
                                "from its topics for /metrics (dead_letter_open), seconds (0: never)")
    auth: AuthSettings = Field(default_factory=AuthSettings,
                               description="bearer-token settings as JSON; normally unset: "
                                           "AuthSettings reads CASESTREAM_AUTH_*")

    @property
    def dsn(self) -> str:
        """The service database's URL, ``<pg_url>/<database>``.

        Raises:
            ConfigError: if ``database`` is empty.
        """
        return self.database_url(self.database)


def settings_error(error: ValidationError, settings_class: type[BaseSettings]) -> ConfigError:
    """A :class:`ConfigError` naming the environment variable of every invalid field, e.g.
    ``CASESTREAM_CASE_PORT='abc': Input should be a valid integer`` (one line per field).

    Service fields report their alias (``<PREFIX><FIELD>``, :func:`service_config`);
    CommonSettings' fields ``CASESTREAM_<FIELD>``.
    """
    prefix = str(settings_class.model_config.get("env_prefix") or "")
    lines = []
    for err in error.errors():
        loc = str(err["loc"][0]) if err.get("loc") else "?"
        var = loc if loc.isupper() else prefix + loc.upper()
        value = err.get("input")
        shown = f"={value!r}" if isinstance(value, (str, int, float, bool)) else ""
        lines.append(f"{var}{shown}: {err['msg']}")
    return ConfigError("; ".join(lines))


def describe_settings_error(error: ValidationError) -> ConfigError:
    """:func:`settings_error` for an error whose settings class is known only by name
    (``error.title``, e.g. raised deep inside a command); ``CASESTREAM_`` prefix if unknown."""
    pending: list[type] = [BaseSettings]
    while pending:
        cls = pending.pop()
        if cls.__name__ == error.title and issubclass(cls, BaseSettings):
            return settings_error(error, cls)
        pending.extend(cls.__subclasses__())
    return settings_error(error, CommonSettings)


S = TypeVar("S", bound=BaseSettings)


def read_settings(settings_class: type[S], service: str) -> S:
    """``settings_class()`` read from the environment (once, at start-up).

    Raises:
        ConfigError: a variable has an invalid value: one line naming it.
    """
    try:
        return settings_class()
    except ValidationError as e:
        raise ConfigError(f"invalid {service} settings: {settings_error(e, settings_class)}") from None


def _variable(cls: type[BaseSettings], name: str) -> str:
    alias = cls.model_fields[name].validation_alias
    if isinstance(alias, str):  # a standard variable of its own, e.g. OTEL_SERVICE_NAME
        return alias
    if issubclass(cls, ServiceSettings) and name not in CommonSettings.model_fields:
        gen = cls.model_config.get("alias_generator")
        alias = gen.validation_alias(name) if gen is not None and gen.validation_alias else None
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
    return f"{cls.model_config.get('env_prefix') or ''}{name.upper()}"


def _default(info: Any) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "shown_default" in extra:  # e.g. a key: named, not printed
        return str(extra["shown_default"])
    if info.default_factory is not None:
        return "-"
    value = info.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return "unset" if value is None or value == "" else str(value)


def undocumented_fields(cls: type[BaseSettings]) -> list[str]:
    """The fields of ``cls`` without a ``Field(description=...)`` (its table lacks them)."""
    return [name for name, info in cls.model_fields.items() if not info.description]


def settings_table(cls: type[BaseSettings], *, fmt: str = "text", own: bool = True) -> str:
    """The environment variables of ``cls``, one per field: variable, default, description
    (the ``Field(description=...)``), in declaration order.

    Args:
        cls: a settings class (a :class:`ServiceSettings` subclass, or :class:`CommonSettings`).
        fmt: ``"text"`` (aligned lines, what a ``settings.py`` docstring holds) or
            ``"markdown"`` (a table: ``| variable | default | meaning |``).
        own: for a ServiceSettings subclass, leave out CommonSettings' fields (they are
            shared: ``settings_table(CommonSettings)``).

    Raises:
        ConfigError: a field has no description (name them): every setting is documented.
    """
    missing = undocumented_fields(cls)
    if missing:
        raise ConfigError(f"{cls.__name__}: fields without Field(description=...): {', '.join(missing)}")
    skip = CommonSettings.model_fields if own and cls is not CommonSettings else {}
    rows = [(_variable(cls, name), _default(info), str(info.description))
            for name, info in cls.model_fields.items() if name not in skip]
    if fmt == "markdown":
        lines = ["| variable | default | meaning |", "| --- | --- | --- |"]
        lines += [f"| `{var}` | `{default}` | {desc} |" for var, default, desc in rows]
        return "\n".join(lines)
    if fmt != "text":
        raise ValueError(f"fmt must be 'text' or 'markdown', not {fmt!r}")
    width = max(len(var) for var, _, _ in rows)
    return "\n".join(f"{var:<{width}}  {desc} (default {default})" for var, default, desc in rows)
