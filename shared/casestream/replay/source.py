"""Kafka side of a replay: partitions, watermarks, start offsets, reading (confluent_kafka).

The replay reads with ``assign`` (no group membership, no offset commits): its position is
the checkpoint in PostgreSQL, never a Kafka consumer group, so it cannot disturb the live
consumer group and produces nothing (no commits, no dead letters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from casestream.kafka.topics import committed_offsets, fetch_batch
from casestream.replay.errors import ReplayError
from casestream.kafka.config import KafkaTarget, client_config

TP = tuple[str, int]


class KafkaSource:
    """Reads the projection's topics from given offsets.

    Args:
        bootstrap: ``bootstrap.servers``.
        topics: topics to read.
        client_id: shows up in broker logs (``casestream-replay-<projection>``).
        config: extra librdkafka consumer settings.
    """

    def __init__(self, bootstrap: KafkaTarget, topics: Iterable[str], *, client_id: str,
                 config: Mapping[str, Any] | None = None) -> None:
        self.topics = tuple(topics)
        self._bootstrap = bootstrap
        conf: dict[str, Any] = {
            **client_config(bootstrap),
            "group.id": client_id,  # required by librdkafka; never joined (assign) nor committed
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.min.bytes": 1,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.min.messages": 200000,
            "isolation.level": "read_committed",
        }
        conf.update(config or {})
        self._consumer = Consumer(conf)
        # Offset queries go through a second, idle client: on the reading client they queue
        # behind in-flight fetches (fetch.wait.max.ms) and took ~0.5-2 s each under load.
        self._meta = Consumer({**client_config(bootstrap), "group.id": client_id,
                               "client.id": f"{client_id}-meta", "enable.auto.commit": False})

    def partitions(self, timeout_s: float = 10.0) -> list[TP]:
        """Every (topic, partition) of the topics, sorted.

        Raises:
            ReplayError: a topic does not exist or the cluster does not answer.
        """
        out: list[TP] = []
        try:
            md = self._meta.list_topics(timeout=timeout_s)
        except KafkaException as e:
            raise ReplayError(f"Kafka metadata unavailable: {e}") from e
        for topic in self.topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                raise ReplayError(f"topic {topic} does not exist"
                                  + (f" ({t.error})" if t is not None else ""))
            out.extend((topic, p) for p in sorted(t.partitions))
        return out

    def watermarks(self, tp: TP, *, cached: bool = False, timeout_s: float = 10.0) -> tuple[int, int]:
        """(low, high) offsets of ``tp``; ``cached`` uses the last fetch's values (no request)."""
        client = self._consumer if cached else self._meta
        try:
            lo, hi = client.get_watermark_offsets(TopicPartition(*tp), timeout=timeout_s,
                                                  cached=cached)
        except KafkaException as e:
            raise ReplayError(f"watermarks of {tp[0]}[{tp[1]}] unavailable: {e}") from e
        return int(lo), int(hi)

    def watermarks_of(self, tps: Iterable[TP], timeout_s: float = 10.0) -> dict[TP, tuple[int, int]]:
        """(low, high) of each partition, queried concurrently (one round trip of latency)."""
        tps = list(tps)
        if len(tps) <= 1:
            return {tp: self.watermarks(tp, timeout_s=timeout_s) for tp in tps}
        with ThreadPoolExecutor(min(16, len(tps)), thread_name_prefix="replay-hw") as pool:
            marks = list(pool.map(lambda tp: self.watermarks(tp, timeout_s=timeout_s), tps))
        return dict(zip(tps, marks, strict=True))

    def high_watermarks(self, tps: Iterable[TP], timeout_s: float = 10.0) -> dict[TP, int]:
        """High watermark of each partition (see :meth:`watermarks_of`)."""
        return {tp: m[1] for tp, m in self.watermarks_of(tps, timeout_s).items()}

    def offsets_for_time(self, tps: Iterable[TP], when: datetime,
                         timeout_s: float = 10.0) -> dict[TP, int]:
        """First offset with timestamp >= ``when`` per partition (its high watermark if none)."""
        ms = int(when.timestamp() * 1000)
        tps = list(tps)
        query = [TopicPartition(t, p, ms) for t, p in tps]
        try:
            found = self._meta.offsets_for_times(query, timeout=timeout_s)
        except KafkaException as e:
            raise ReplayError(f"offsets_for_times failed: {e}") from e
        out: dict[TP, int] = {}
        for tp in found:
            key = (tp.topic, tp.partition)
            out[key] = tp.offset if tp.offset >= 0 else self.watermarks(key)[1]
        return out

    def committed(self, group: str, tps: Iterable[TP], timeout_s: float = 10.0) -> dict[TP, int | None]:
        """Committed offset of consumer group ``group`` per partition (None: nothing committed).

        Raises:
            ReplayError: the group coordinator did not answer.
        """
        try:
            return committed_offsets(self._bootstrap, group, tps, timeout_s)
        except KafkaException as e:
            raise ReplayError(f"committed offsets of consumer group {group} unavailable: {e}") from e

    def assign(self, positions: Mapping[TP, int]) -> None:
        """Start reading each partition at its next offset."""
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])

    def positions(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The client's next fetch offset per partition (past control records); absent if unknown."""
        found = self._consumer.position([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def pause(self, tps: Iterable[TP]) -> None:
        """Stop fetching ``tps`` (they reached their end)."""
        self._consumer.pause([TopicPartition(t, p) for t, p in tps])

    def consume(self, n: int, timeout_s: float) -> list[Any]:
        """Up to ``n`` messages (``confluent_kafka.Message``), as
        :func:`casestream.kafka.topics.fetch_batch` returns them (what is already fetched at
        once, else the first to arrive within ``timeout_s`` s): the last, short batch of a
        range does not wait out the timeout. Errors other than EOF raise.

        Raises:
            ReplayError: a fatal or partition-level error.
        """
        msgs = fetch_batch(self._consumer, n, timeout_s)
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise ReplayError(f"Kafka error reading {m.topic()}[{m.partition()}]: {err}")
        return out

    def close(self) -> None:
        """Leave (nothing to commit)."""
        self._consumer.close()
        self._meta.close()
