"""librdkafka configuration for casestream producers, with the delivery guarantees enforced.

Producers run with ``enable.idempotence=true`` and ``acks=all``; a message
counts as published only in its delivery report without error. :func:`producer_config`
builds that configuration and refuses overrides that would weaken it, so an operator
cannot switch the relay to ``acks=1`` by an environment variable.

Settings (librdkafka names, CONFIGURATION.md):

* ``enable.idempotence=true``: per-partition ordering across internal retries, no
  duplicates from retries; implies ``max.in.flight.requests.per.connection<=5`` and
  ``retries`` unbounded within ``message.timeout.ms``.
* ``acks=all``: the leader waits for the full in-sync replica set.
* ``linger.ms=1``: the relay hands librdkafka a whole claimed batch at once, so batching
  needs no waiting; 1 ms instead of 5 halves commit → topic latency at 1,000 events/s
  (bench/relay.py --latency-only: p50 13.8 ms / p99 53 ms vs 27 / 128 ms) at no cost to
  throughput.
* ``message.timeout.ms=300000`` (librdkafka's default, alias ``delivery.timeout.ms``):
  how long librdkafka retries a message internally (backoff ``retry.backoff.ms`` →
  ``retry.backoff.max.ms``, exponential with jitter, KIP-580) before reporting
  ``_MSG_TIMED_OUT``. A broker outage shorter than this is absorbed without any
  reordering; see the relay design note on why a *timed out* message may leave a gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from casestream.errors import ConfigError

__all__ = ["PRODUCER_DEFAULTS", "RESERVED_CLIENT_PROPERTIES", "KafkaTarget", "admin_config",
           "bootstrap_of", "check_client_properties", "client_config", "connection_config",
           "enforce_producer_guarantees",
           "producer_config", "redact"]

KafkaTarget: TypeAlias = str | Mapping[str, Any]
"""Where a Kafka client connects: ``bootstrap.servers`` alone (``"host:9092,host2:9092"``), or
a librdkafka configuration holding it and the connection properties every client of a
process shares (``security.protocol``, ``sasl.*``, ``ssl.*``: :func:`client_config`)."""

#: Client properties a deployment may not set through CASESTREAM_KAFKA_PROP_* or the
#: properties file, with the reason: each is owned by a casestream setting or guarantee.
RESERVED_CLIENT_PROPERTIES: Mapping[str, str] = {
    "bootstrap.servers": "set CASESTREAM_KAFKA_BOOTSTRAP",
    "group.id": "each consumer's group id is its consumer name",
    "enable.auto.commit": "offsets are committed after the database transaction",
    "enable.auto.offset.store": "offsets are stored after the database transaction",
    "enable.idempotence": "the outbox relay requires enable.idempotence=true",
    "acks": "the outbox relay requires acks=all",
}

#: Substrings of property names whose values are secrets (never printed).
_SECRET_MARKS = ("password", "secret", "sasl.jaas.config", "ssl.key.pem", "token", "user.info")

PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 1,
    "message.timeout.ms": 300_000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1_000,
    "socket.keepalive.enable": True,
    # Partition by murmur2 of the key like the Java client and Kafka Connect (Debezium),
    # so our relay and a Debezium connector put one aggregate on the same partition.
    "partitioner": "murmur2_random",
}

# Overrides that would break the idempotent, fully acknowledged publishing guarantee.
_ENFORCED: Mapping[str, tuple[Any, ...]] = {
    "enable.idempotence": (True, "true", "True", 1, "1"),
    "acks": ("all", -1, "-1"),
}


def producer_config(
    bootstrap: str, *, client_id: str | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return a confluent-kafka ``Producer`` config: :data:`PRODUCER_DEFAULTS` + overrides.

    Args:
        bootstrap: ``bootstrap.servers``, e.g. ``"127.0.0.1:19092"``.
        client_id: ``client.id`` shown in broker logs and metrics (e.g. ``"case.relay"``).
        overrides: further librdkafka properties (``linger.ms``, ``message.timeout.ms``...).

    Raises:
        ConfigError: ``bootstrap`` is empty, or an override weakens ``enable.idempotence``
            or ``acks``.
    """
    if not bootstrap:
        raise ConfigError("bootstrap.servers is empty (set CASESTREAM_KAFKA_BOOTSTRAP)")
    config: dict[str, Any] = dict(PRODUCER_DEFAULTS)
    config["bootstrap.servers"] = bootstrap
    if client_id:
        config["client.id"] = client_id
    for key, value in (overrides or {}).items():
        allowed = _ENFORCED.get(key)
        if allowed is not None and value not in allowed:
            raise ConfigError(f"producer setting {key}={value!r} is not allowed: "
                              f"the outbox relay requires {key}={allowed[0]!r}")
        config[key] = value
    return config


def enforce_producer_guarantees(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``config`` with :data:`PRODUCER_DEFAULTS` filled in where absent.

    Used by the relay on a caller-supplied config (which must hold
    ``bootstrap.servers``).

    Raises:
        ConfigError: ``bootstrap.servers`` missing, or ``enable.idempotence``/``acks``
            set to a weaker value.
    """
    if not config.get("bootstrap.servers"):
        raise ConfigError("producer config has no bootstrap.servers")
    merged = dict(PRODUCER_DEFAULTS)
    for key, value in config.items():
        allowed = _ENFORCED.get(key)
        if allowed is not None and value not in allowed:
            raise ConfigError(f"producer setting {key}={value!r} is not allowed: "
                              f"the outbox relay requires {key}={allowed[0]!r}")
        merged[key] = value
    return merged


def admin_config(bootstrap: KafkaTarget) -> dict[str, Any]:
    """Return an ``AdminClient`` config for ``bootstrap`` (topic creation, describe):
    :func:`client_config`.

    Raises:
        ConfigError: no ``bootstrap.servers``.
    """
    return client_config(bootstrap)


def client_config(target: KafkaTarget) -> dict[str, Any]:
    """A fresh librdkafka config dict connecting to ``target``: ``{"bootstrap.servers":
    target}`` for a string, a copy of a mapping (its security properties kept). Callers add
    their own client's settings (``group.id``...) to it.

    Raises:
        ConfigError: ``bootstrap.servers`` is empty or missing.
    """
    config = {"bootstrap.servers": target} if isinstance(target, str) else dict(target)
    if not config.get("bootstrap.servers"):
        raise ConfigError("bootstrap.servers is empty (set CASESTREAM_KAFKA_BOOTSTRAP)")
    return config


#: Properties that say how to reach and authenticate to the cluster (librdkafka
#: CONFIGURATION.md, "*" = both producer and consumer): what a client derived from another
#: (a dead-letter producer, an admin client beside a producer or consumer) copies.
_CONNECTION_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "socket.", "broker.",
                        "client.", "enable.ssl.", "https.")
_CONNECTION_KEYS = frozenset({"metadata.max.age.ms", "topic.metadata.refresh.interval.ms",
                              "reconnect.backoff.ms", "reconnect.backoff.max.ms"})


def connection_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection part of a producer or consumer config (bootstrap, security, SASL, TLS,
    sockets, client id): the same cluster with the same credentials, for a derived client."""
    return {k: v for k, v in config.items()
            if k.startswith(_CONNECTION_PREFIXES) or k in _CONNECTION_KEYS}


def bootstrap_of(target: KafkaTarget) -> str:
    """The ``bootstrap.servers`` of ``target``, for messages (never the secrets beside it)."""
    return target if isinstance(target, str) else str(target.get("bootstrap.servers", ""))


def redact(properties: Mapping[str, Any]) -> dict[str, Any]:
    """``properties`` with every secret value (a name holding ``password``, ``secret``,
    ``token``, ``sasl.jaas.config``, ``ssl.key.pem``, ``user.info``) shown as ``***``."""
    return {k: ("***" if any(m in k for m in _SECRET_MARKS) else v) for k, v in properties.items()}


def check_client_properties(properties: Mapping[str, Any], *, source: str) -> None:
    """Refuse properties that casestream owns (:data:`RESERVED_CLIENT_PROPERTIES`), and let
    librdkafka validate the rest now (unknown name, bad value, unreadable
    ``ssl.ca.location``) rather than in a worker thread later.

    Args:
        properties: the client properties of a deployment (without ``bootstrap.servers``).
        source: where they came from, for messages (variables or the properties file).

    Raises:
        ConfigError: one line naming the property and the reason.
    """
    for key in properties:
        if key in RESERVED_CLIENT_PROPERTIES:
            raise ConfigError(f"{source}: Kafka property {key} is not settable here: "
                              f"{RESERVED_CLIENT_PROPERTIES[key]}")
    if not properties:
        return
    # lazy (start-up cost): librdkafka only when a deployment sets client properties
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        # an unreachable bootstrap: only the configuration is parsed, nothing connects yet
        AdminClient({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, **properties})
    except (KafkaException, ValueError, TypeError) as e:
        detail = e.args[0].str() if isinstance(e, KafkaException) and e.args else str(e)
        raise ConfigError(f"{source}: invalid Kafka client properties: {detail}") from None
