"""Readiness checks of the shared dependencies: Kafka and the schema registry.

Driver module (confluent-kafka, httpx). Each factory returns a
``casestream.service.process.ReadinessCheck``: a callable that returns None when the dependency
answers and raises (with a message naming it) when it does not, within ``timeout_s`` —
readiness fails fast. The database check stays in each service's bootstrap (it knows its
own tables).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from casestream.errors import CasestreamError

__all__ = ["kafka_check", "registry_check", "dependency_checks"]


class DependencyDown(CasestreamError):
    """A dependency did not answer a readiness probe in time."""


def kafka_check(bootstrap: str, timeout_s: float = 2.0) -> Callable[[], None]:
    """Check: the Kafka cluster at ``bootstrap`` answers a metadata request.

    One AdminClient is created lazily and reused (librdkafka keeps its connections).
    """
    holder: list[object] = []

    def check() -> None:
        # lazy (start-up cost): confluent_kafka only when the Kafka check runs
        from confluent_kafka.admin import AdminClient

        try:
            if not holder:
                holder.append(AdminClient({
                    "bootstrap.servers": bootstrap,
                    "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000))}))
            md = holder[0].list_topics(timeout=timeout_s)  # type: ignore[attr-defined]
        except Exception as e:
            raise DependencyDown(f"kafka {bootstrap}: {e}") from e
        if not md.brokers:
            raise DependencyDown(f"kafka {bootstrap}: no brokers in metadata")

    return check


def registry_check(url: str, timeout_s: float = 2.0) -> Callable[[], None]:
    """Check: the Confluent-API registry at ``url`` answers ``GET /subjects`` with 200."""

    def check() -> None:
        try:
            r = httpx.get(url.rstrip("/") + "/subjects", timeout=timeout_s)
        except httpx.HTTPError as e:
            raise DependencyDown(f"registry {url}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise DependencyDown(f"registry {url}: HTTP {r.status_code}")

    return check


def dependency_checks(kafka_bootstrap: str, registry_url: str,
                      timeout_s: float = 2.0) -> dict[str, Callable[[], None]]:
    """``{"kafka": ..., "registry": ...}`` checks for a service's ``readiness`` mapping."""
    return {"kafka": kafka_check(kafka_bootstrap, timeout_s),
            "registry": registry_check(registry_url, timeout_s)}
