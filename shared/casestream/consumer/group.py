"""Several members of one consumer group in one process: partition-parallel consumption.

A :class:`ConsumerRuntime` applies one batch at a time on one connection, and its Python work
(decoding, statement building) shares one GIL with the database round trips it waits on. A
:class:`ConsumerGroup` runs ``concurrency`` runtimes with the same ``group.id`` in one process
— each its own Kafka consumer, database thread and pooled connection — so the broker's
assignor spreads the partitions over them, like Kafka Streams' ``num.stream.threads`` or
Spring Kafka's ``concurrency``. Ordering is Kafka's: one partition, one member at a time.
Nothing new is shared between members: two members meeting the same aggregate (a re-driven
event on ``<name>.redrive`` while its live topic partition is elsewhere) are two replicas of a
service, which the inbox primary key and the version guard already serialise.

Metrics: member ``i`` reports as ``<name>#<i>``; :attr:`ConsumerGroup.stats` sums them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from casestream.consumer.records import ConsumerStats, EnvelopeDecoder
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers.registry import HandlerRegistry, OutboxAppender

__all__ = ["ConsumerGroup", "GroupStats"]

log = logging.getLogger("casestream.consumer")

_COUNTERS = tuple(f.name for f in fields(ConsumerStats) if f.name != "by_reason")


class GroupStats:
    """Read-only sum of the members' :class:`ConsumerStats` (same attribute names)."""

    def __init__(self, members: Sequence[ConsumerRuntime]) -> None:
        self._members = members

    def __getattr__(self, name: str) -> Any:
        if name in _COUNTERS:
            return sum(getattr(m.stats, name) for m in self._members)
        if name == "by_reason":
            out: dict[str, int] = {}
            for m in self._members:
                for reason, n in dict(m.stats.by_reason).items():
                    out[reason] = out.get(reason, 0) + n
            return out
        raise AttributeError(name)

    def __repr__(self) -> str:
        return "GroupStats(" + ", ".join(f"{c}={getattr(self, c)}" for c in _COUNTERS) + ")"


class _AllReady:
    """``is_set()``/``wait()`` over the members' ``ready`` events (an assignment arrived)."""

    def __init__(self, members: Sequence[ConsumerRuntime]) -> None:
        self._members = members

    def is_set(self) -> bool:
        return all(m.ready.is_set() for m in self._members)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for m in self._members:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not m.ready.wait(left):
                return False
        return True


class ConsumerGroup:
    """``concurrency`` :class:`ConsumerRuntime` members of group ``name`` in this process.

    Args:
        concurrency: members (>= 1); more members than partitions leaves some idle.
        name, topics, handlers, codec, kafka_config, settings, outbox: as for
            :class:`ConsumerRuntime`, shared by every member.
        pool: ``psycopg_pool.ConnectionPool``; each member holds one connection while it
            runs, so ``max_size`` must be at least ``concurrency`` plus the service's other users.

    Raises:
        ConfigError: ``concurrency`` < 1, a pool smaller than ``concurrency x
            (key_concurrency + 1)`` when ``settings.key_concurrency > 1``, or what
            :class:`ConsumerRuntime` raises.
    """

    def __init__(self, concurrency: int, name: str, topics: Sequence[str], handlers: HandlerRegistry,
                 codec: EnvelopeDecoder, pool: Any, kafka_config: dict[str, Any],
                 settings: ConsumerSettings | None = None, *,
                 outbox: OutboxAppender | None = None) -> None:
        if concurrency < 1:
            raise ConfigError(f"consumer {name}: concurrency must be >= 1, got {concurrency}")
        k = (settings or ConsumerSettings()).key_concurrency
        max_size = getattr(pool, "max_size", None)
        if k > 1 and isinstance(max_size, int) and max_size < concurrency * (k + 1):
            raise ConfigError(f"consumer {name}: {concurrency} members with key_concurrency={k}"
                              f" need a connection pool of max_size >= {concurrency * (k + 1)}"
                              f" ({k + 1} per member), the pool has max_size={max_size}")
        self.name = name
        client_id = kafka_config.get("client.id", name)
        instance = kafka_config.get("group.instance.id")  # static members: one identity each
        self.members = [
            ConsumerRuntime(name, topics, handlers, codec, pool,
                            {**kafka_config, "client.id": f"{client_id}#{i}",
                             **({"group.instance.id": f"{instance}#{i}"} if instance else {})},
                            settings, outbox=outbox, metrics_name=f"{name}#{i}")
            for i in range(concurrency)]
        self.stats = GroupStats(self.members)
        self.ready = _AllReady(self.members)

    def stalled(self) -> str | None:
        """The first stalled member's :meth:`ConsumerRuntime.stalled` reason, prefixed with
        its metrics name; None if no member is stalled."""
        for i, m in enumerate(self.members):
            why = m.stalled()
            if why is not None:
                return f"{self.name}#{i}: {why}"
        return None

    def run(self, stop: threading.Event) -> None:
        """Run every member until ``stop`` is set; each finishes its batch, commits and leaves
        the group. If a member fails, the others are stopped too and its exception is raised."""
        inner = threading.Event()
        errors: list[BaseException] = []

        def member(rt: ConsumerRuntime) -> None:
            try:
                rt.run(inner)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                log.exception("%s: member %s failed; stopping the group", self.name, rt.name)
                errors.append(e)
                inner.set()

        threads = [threading.Thread(target=member, args=(rt,), name=f"{self.name}#{i}", daemon=True)
                   for i, rt in enumerate(self.members)]
        for t in threads:
            t.start()
        while not inner.is_set():
            if stop.wait(0.2):
                inner.set()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
