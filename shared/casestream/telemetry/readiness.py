"""Readiness checks of the shared dependencies: Kafka and the schema registry.

Driver module (confluent-kafka, httpx). Each factory returns a
``casestream.service.process.ReadinessCheck``: a callable that returns None when the dependency
answers and raises (with a message naming it) when it does not, within ``timeout_s`` —
readiness fails fast. The database check stays in each service's bootstrap (it knows its
own tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, bootstrap_of, client_config

__all__ = ["kafka_check", "registry_check", "dependency_checks"]


class DependencyDown(CasestreamError):
    """A dependency did not answer a readiness probe in time."""


def kafka_check(bootstrap: KafkaTarget, timeout_s: float = 2.0) -> Callable[[], None]:
    """Check: the Kafka cluster at ``bootstrap`` (``bootstrap.servers``, or a client config
    with its security properties) answers a metadata request.

    One AdminClient is created lazily and reused (librdkafka keeps its connections).
    """
    holder: list[object] = []
    shown = bootstrap_of(bootstrap)

    def check() -> None:
        # lazy (start-up cost): confluent_kafka only when the Kafka check runs
        from confluent_kafka.admin import AdminClient

        try:
            if not holder:
                holder.append(AdminClient({
                    **client_config(bootstrap),
                    "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000))}))
            md = holder[0].list_topics(timeout=timeout_s)  # type: ignore[attr-defined]
        except Exception as e:
            raise DependencyDown(f"kafka {shown}: {e}") from e
        if not md.brokers:
            raise DependencyDown(f"kafka {shown}: no brokers in metadata")

    return check


def registry_check(url: str, timeout_s: float = 2.0, *,
                   properties: Mapping[str, Any] | None = None) -> Callable[[], None]:
    """Check: the Confluent-API registry at ``url`` answers ``GET /subjects`` with 200.

    ``properties``: the registry client's (authentication, CA): with them the check goes
    through a ``ConfluentSchemaRegistry`` (no retries), so it authenticates as the codec does.
    """
    if properties:
        holder: list[Any] = []

        def authenticated() -> None:
            # lazy (start-up cost): the registry client only when the check runs
            from casestream.events.registry import ConfluentSchemaRegistry

            try:
                if not holder:
                    holder.append(ConfluentSchemaRegistry(url, timeout=timeout_s, max_retries=0,
                                                          options=properties))
                holder[0].subjects()
            except CasestreamError as e:
                raise DependencyDown(f"registry {url}: {e}") from e

        return authenticated

    def check() -> None:
        try:
            r = httpx.get(url.rstrip("/") + "/subjects", timeout=timeout_s)
        except httpx.HTTPError as e:
            raise DependencyDown(f"registry {url}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise DependencyDown(f"registry {url}: HTTP {r.status_code}")

    return check


def dependency_checks(kafka_bootstrap: KafkaTarget, registry_url: str, timeout_s: float = 2.0, *,
                      registry_properties: Mapping[str, Any] | None = None,
                      ) -> dict[str, Callable[[], None]]:
    """``{"kafka": ..., "registry": ...}`` checks for a service's ``readiness`` mapping."""
    return {"kafka": kafka_check(kafka_bootstrap, timeout_s),
            "registry": registry_check(registry_url, timeout_s, properties=registry_properties)}
