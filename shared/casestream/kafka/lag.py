"""Consumer-group lag read from Kafka: the one rule every lag reader uses (``casestream
status``, the console's Flow data, the consumer's ``consumer_group_lag_messages`` gauge).

A partition's lag is ``high watermark - start`` messages, where ``start`` is the group's
committed offset, or — when the group has no commit there (or one below the low watermark,
retention deleted it) — the position the group would start at: the first retained offset
(``auto.offset.reset=earliest``, the casestream default), so the whole retained log counts.

Driver module: ``client`` is a ``confluent_kafka.Consumer`` whose ``group.id`` is the group
(``OffsetFetch`` only; the group is never joined by this read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GroupPartition", "behind", "read_group_partitions", "read_partitions"]


@dataclass(frozen=True, slots=True)
class GroupPartition:
    """One partition of a group: committed offset (None: none), watermarks, lag (messages)."""

    topic: str
    partition: int
    committed: int | None
    low: int
    high: int

    @property
    def lag(self) -> int:
        return behind(self.committed, self.low, self.high)


def behind(committed: int | None, low: int, high: int) -> int:
    """Messages a group is behind on a partition: ``high - max(committed, low)``, counting
    from ``low`` (the first retained offset) when there is no commit (``None`` or < 0)."""
    start = low if committed is None or committed < 0 else max(committed, low)
    return max(0, high - start)


def read_group_partitions(client: Any, topics: Sequence[str], *,
                          timeout_s: float = 5.0) -> list[GroupPartition]:
    """Every partition of ``topics`` (topics that do not exist are left out) with the
    committed offset of ``client``'s group and the partition's watermarks.

    Raises:
        KafkaException: the cluster or the group coordinator did not answer in ``timeout_s``.
    """
    md = client.list_topics(timeout=timeout_s)
    tps = [(t, p) for t in dict.fromkeys(topics)
           if (meta := md.topics.get(t)) is not None and meta.error is None
           for p in sorted(meta.partitions)]
    return read_partitions(client, tps, timeout_s=timeout_s)


def read_partitions(client: Any, partitions: Sequence[tuple[str, int]], *,
                    timeout_s: float = 5.0) -> list[GroupPartition]:
    """``(topic, partition)`` pairs with the committed offset of ``client``'s group and
    their watermarks (one ``OffsetFetch``, then one watermark query per partition).

    Raises:
        KafkaException: the cluster or the group coordinator did not answer in ``timeout_s``.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import TopicPartition

    from casestream.kafka.topics import committed

    if not partitions:
        return []
    out = []
    for tp in committed(client, [TopicPartition(t, p) for t, p in partitions], timeout_s):
        low, high = client.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                 timeout=timeout_s)
        out.append(GroupPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else None,
                                  low, high))
    return out
