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
from typing import Any

from casestream.errors import ConfigError

__all__ = ["PRODUCER_DEFAULTS", "producer_config", "enforce_producer_guarantees", "admin_config"]

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


def admin_config(bootstrap: str) -> dict[str, Any]:
    """Return an ``AdminClient`` config for ``bootstrap`` (topic creation, describe)."""
    if not bootstrap:
        raise ConfigError("bootstrap.servers is empty (set CASESTREAM_KAFKA_BOOTSTRAP)")
    return {"bootstrap.servers": bootstrap}
