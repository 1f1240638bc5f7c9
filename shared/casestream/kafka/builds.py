"""A consumer's build in its Kafka client id, so the broker's view of a group tells which
build each member runs (``AdminClient.describe_consumer_groups``: every member's client id).

Client id ``<consumer>@<build>`` (a :class:`~casestream.consumer.group.ConsumerGroup` appends
``#<i>`` per member); the build is ``CASESTREAM_BUILD`` (an image tag, a commit), 1..100
characters of ``[A-Za-z0-9._+-]``. A client id without ``@`` names no build.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BUILD_PATTERN", "consumer_client_id", "build_of", "member_builds"]

BUILD_PATTERN = r"^[A-Za-z0-9._+-]{1,100}$"


def consumer_client_id(base: str, build: str | None) -> str:
    """``base@build``, or ``base`` alone when there is no build."""
    return f"{base}@{build}" if build else base


def build_of(client_id: str | None) -> str | None:
    """The build a client id names (``billing.ledger@1.4.2#0`` -> ``1.4.2``), None if none."""
    _, sep, rest = (client_id or "").rpartition("@")
    return (rest.split("#", 1)[0] or None) if sep else None


def member_builds(connection: dict[str, Any], group: str, *, timeout_s: float = 10.0) -> tuple[str, list[str | None]]:
    """The broker's view of consumer group ``group``: its state name (``STABLE``, ``EMPTY``,
    ``PREPARING_REBALANCE``...; ``DEAD`` when it does not exist) and each member's build
    (:func:`build_of` of its client id). ``connection``: a librdkafka client configuration.

    Raises:
        KafkaException: the group was not described within ``timeout_s``.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(connection)  # held until the answer: a client gone never completes its futures
    future = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    desc = future.result(timeout=timeout_s)
    return getattr(desc.state, "name", str(desc.state)), [build_of(m.client_id) for m in desc.members]
