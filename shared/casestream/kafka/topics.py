"""Topic settings read from the broker, and the size of a record in a Kafka record batch.

:class:`TopicLimits` answers "what is the largest record batch topic T accepts": the topic's
effective ``max.message.bytes`` (the topic override, else the broker's ``message.max.bytes``;
Kafka topic config ``max.message.bytes``: "the largest record batch size allowed by Kafka,
after compression if compression is enabled"), read with ``DescribeConfigs`` and cached.

:func:`record_batch_size` is the size in bytes of a record batch (message format v2, KIP-98)
holding one uncompressed record: 61 bytes of batch header plus the record with its varint
lengths. It is exact for one record and never smaller than what the broker measures, so a
row whose size exceeds the topic limit can never be accepted on its own (without
compression).
"""

from __future__ import annotations

import logging
import time
from casestream.kafka.config import KafkaTarget, client_config
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

__all__ = ["TopicLimits", "record_batch_size", "record_batch_size_at_most", "describe_topic_configs",
           "committed_offsets", "fetch_batch",
           "partition_positions", "topic_retention_ms", "read_messages",
           "RECORD_BATCH_OVERHEAD"]

log = logging.getLogger("casestream.kafka")

#: Record batch header, message format v2 (baseOffset 8, batchLength 4, partitionLeaderEpoch
#: 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4, first/maxTimestamp 16, producerId 8,
#: producerEpoch 2, baseSequence 4, records count 4).
RECORD_BATCH_OVERHEAD = 61

#: Kafka's broker default ``message.max.bytes`` (1 MiB + 12 bytes), used when the broker
#: cannot be asked.
BROKER_DEFAULT_LIMIT = 1_048_588
# Group-coordinator errors a client retries (Kafka protocol error codes 14, 15, 16).
_COORDINATOR_MOVING = frozenset({KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                 KafkaError.COORDINATOR_NOT_AVAILABLE,
                                 KafkaError.NOT_COORDINATOR})



def _retrying(call: Callable[[float], Any], timeout_s: float, floor_s: float,
              also: frozenset[int] = frozenset()) -> Any:
    """``call(seconds left)`` until it answers, retrying a retriable ``KafkaError`` (or one whose
    code is in ``also``) every 0.2 s until ``timeout_s``; each call gets at least ``floor_s``.

    Raises:
        KafkaException: a non-retriable error, or a retriable one still there at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(max(floor_s, deadline - time.monotonic()))
        except KafkaException as e:
            error = e.args[0] if e.args else None
            if not (isinstance(error, KafkaError) and (error.retriable() or error.code() in also)
                    and time.monotonic() + 0.2 < deadline):
                raise
            time.sleep(0.2)


def watermarks(client: Any, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """``(low, high)`` offsets of ``tp``, retrying a retriable broker error (e.g.
    NOT_LEADER_FOR_PARTITION while a leader moves after a restart) until ``timeout_s``.

    Raises:
        KafkaException: a non-retriable error, or a retriable one still there at the deadline.
    """
    return _retrying(lambda left: client.get_watermark_offsets(tp, timeout=left), timeout_s, 0.1)


def _varint_size(n: int) -> int:
    """Bytes of ``n`` as a zig-zag varint (Kafka protocol ``varint``)."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def record_batch_size(key: bytes | None, value: bytes | None,
                      headers: Sequence[tuple[str, bytes | None]] = ()) -> int:
    """Size in bytes of a v2 record batch holding only this record (no compression).

    Record fields: attributes (1), timestampDelta and offsetDelta (varint 0: 1 each), key and
    value (varint length, -1 for null), header count (varint) and per header the key and
    value with varint lengths; the record is prefixed by its varint length.
    """
    body = 1 + 1 + 1
    for part in (key, value):
        body += _varint_size(-1 if part is None else len(part)) + (len(part) if part else 0)
    body += _varint_size(len(headers))
    for name, hval in headers:
        hkey = name.encode()
        body += _varint_size(len(hkey)) + len(hkey)
        body += _varint_size(-1 if hval is None else len(hval)) + (len(hval) if hval else 0)
    return RECORD_BATCH_OVERHEAD + _varint_size(body) + body


def record_batch_size_at_most(key: bytes | None, value: bytes | None,
                              headers: Sequence[tuple[str, bytes | None]] = ()) -> int:
    """An upper bound of :func:`record_batch_size` (bytes), cheaper to compute: every varint
    counted at its 5-byte maximum for 32-bit lengths and a header name at 4 bytes per
    character (UTF-8's maximum). A record whose bound is within a limit fits it; only a
    record above the bound needs :func:`record_batch_size`."""
    size = RECORD_BATCH_OVERHEAD + 5 + 3 + 10 + 5 + (len(key) if key else 0) + (len(value) if value else 0)
    for name, hval in headers:
        size += 10 + 4 * len(name) + (len(hval) if hval else 0)
    return size


def fetch_batch(consumer: Any, max_messages: int, timeout_s: float) -> list[Any]:
    """Up to ``max_messages`` records from ``consumer`` (``confluent_kafka.Consumer``): what
    is already fetched, at once; when nothing is, the first record to arrive within
    ``timeout_s`` s together with what came with it.

    ``Consumer.consume(n, timeout)`` returns only when n messages are there or the timeout has
    passed (librdkafka ``rd_kafka_consume_batch_queue``): a batch asked with the poll timeout
    waits the whole timeout whenever fewer records than a batch are arriving. In bulk the
    client's queue is ahead of the reader (``queued.min.messages``), so batches stay full.
    """
    msgs = consumer.consume(max_messages, 0)
    if msgs or timeout_s <= 0:
        return msgs
    msgs = consumer.consume(1, timeout_s)
    if msgs and max_messages > 1:
        msgs.extend(consumer.consume(max_messages - 1, 0))
    return msgs


def describe_topic_configs(admin: AdminClient, topics: Iterable[str], names: Sequence[str],
                           timeout_s: float = 10.0) -> dict[str, dict[str, str]]:
    """Read the effective values of config ``names`` of each topic (``DescribeConfigs``).

    Returns ``{topic: {name: value}}`` for the topics that exist; a topic the broker does
    not know (not created yet) is left out.

    Raises:
        KafkaException: the broker could not be asked (other than an unknown topic).
    """
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    if not resources:
        return {}
    out: dict[str, dict[str, str]] = {}
    for res, fut in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = fut.result(timeout_s)
        except TimeoutError:
            # the future's own timeout (broker down): the documented KafkaException, so a
            # caller that falls back on a broker error also falls back here
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"DescribeConfigs of {res.name}: no answer in {timeout_s} s")) from None
        except KafkaException as e:
            if e.args and getattr(e.args[0], "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                continue
            raise
        out[res.name] = {n: entries[n].value for n in names if n in entries}
    return out


class TopicLimits:
    """Cached ``max.message.bytes`` of the topics a producer writes to.

    Args:
        admin_config: ``AdminClient`` configuration (``bootstrap.servers`` at least).
        ttl_s: how long a value read is trusted, seconds; :meth:`forget` drops one early
            (the relay calls it when the broker rejects a batch as too large).
        clock: monotonic clock (tests).

    A topic that does not exist yet, or a broker that does not answer, gets
    :data:`BROKER_DEFAULT_LIMIT` for one ``ttl_s`` of retry delay — logged, never raised: the
    broker itself still enforces its limit.
    """

    def __init__(self, admin_config: dict[str, Any], *, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._admin_config = dict(admin_config)
        self._admin: AdminClient | None = None
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[int, float]] = {}

    def limits(self, topics: Iterable[str]) -> dict[str, int]:
        """Return ``{topic: max.message.bytes}`` for ``topics`` (bytes), reading stale ones."""
        now = self._clock()
        wanted = set(topics)
        stale = sorted(t for t in wanted if t not in self._cache or self._cache[t][1] <= now)
        if stale:
            self._refresh(stale, now)
        return {t: self._cache[t][0] for t in wanted}

    def warm(self) -> None:
        """Create the admin client and start its broker connection (a ``DescribeCluster``
        request whose answer is not awaited), so the first :meth:`limits` pays one round
        trip rather than the client's start-up and bootstrap as well. Never raises: a broker
        that does not answer is met again, and logged, by :meth:`limits`."""
        try:
            if self._admin is None:
                self._admin = AdminClient(self._admin_config)
            self._admin.describe_cluster(request_timeout=10.0)
        except KafkaException as e:
            log.debug("topic limits: admin client not warmed (%s)", e)

    def forget(self, topic: str) -> None:
        """Read ``topic``'s limit again at its next use."""
        self._cache.pop(topic, None)

    def _refresh(self, topics: list[str], now: float) -> None:
        try:
            if self._admin is None:
                self._admin = AdminClient(self._admin_config)
            found = describe_topic_configs(self._admin, topics, ["max.message.bytes"])
        except KafkaException as e:
            log.warning("could not read max.message.bytes of %s (%s); assuming %d bytes for now",
                        ", ".join(topics), e, BROKER_DEFAULT_LIMIT)
            found = {}
        for t in topics:
            value = found.get(t, {}).get("max.message.bytes")
            limit = int(value) if value else BROKER_DEFAULT_LIMIT
            self._cache[t] = (limit, now + self._ttl_s)


def topic_names(bootstrap: KafkaTarget, timeout_s: float = 5.0) -> list[str]:
    """Every topic of the cluster, sorted.

    Raises:
        KafkaException: the cluster did not answer within ``timeout_s``.
    """
    return sorted(AdminClient(client_config(bootstrap)).list_topics(timeout=timeout_s).topics)


def watermark_totals(bootstrap: KafkaTarget, wanted: Callable[[str], bool],
                     timeout_s: float = 5.0) -> dict[str, int]:
    """Topic -> messages it holds (high - low watermark, summed over partitions), for every
    topic of the cluster whose name ``wanted`` accepts (one metadata request, one client).

    Raises:
        KafkaException: the cluster did not answer within ``timeout_s``.
    """
    topics = AdminClient(client_config(bootstrap)).list_topics(timeout=timeout_s).topics
    probe = Consumer({**client_config(bootstrap), "group.id": "casestream-watermarks",
                      "enable.auto.commit": False})
    try:
        out: dict[str, int] = {}
        for name, meta in sorted(topics.items()):
            if not wanted(name):
                continue
            total = 0
            for p in meta.partitions:
                low, high = watermarks(probe, TopicPartition(name, p), timeout_s)
                total += max(0, high - low)
            out[name] = total
        return out
    finally:
        probe.close()


def topic_partitions(bootstrap: KafkaTarget, topic: str, timeout_s: float = 10.0) -> list[int]:
    """The partition numbers of ``topic``, sorted ([] when the topic does not exist).

    Never creates it: an admin client is a producer to librdkafka, whose metadata request
    for a named topic asks the broker to auto-create it unless ``allow.auto.create.topics``
    is false (and ``topic`` may come from operator input).

    Raises:
        KafkaException: the cluster did not answer within ``timeout_s``.
    """
    admin = AdminClient({**client_config(bootstrap), "allow.auto.create.topics": False})
    meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None:
        return []
    return sorted(meta.partitions)


def committed(client: Any, tps: list[TopicPartition], timeout_s: float) -> list[TopicPartition]:
    """``client.committed(tps)`` (an ``OffsetFetch`` for ``client``'s group), retrying a retriable
    error and the coordinator moving or loading ``__consumer_offsets`` (``NOT_COORDINATOR``,
    ``COORDINATOR_LOAD_IN_PROGRESS``, ``COORDINATOR_NOT_AVAILABLE``) until ``timeout_s``.

    Raises:
        KafkaException: a non-retriable error, or a retriable one still there at the deadline.
    """
    return _retrying(lambda left: client.committed(tps, timeout=left), timeout_s, 0.5,
                     _COORDINATOR_MOVING)


def committed_offsets(bootstrap: KafkaTarget, group: str, partitions: Iterable[tuple[str, int]],
                      timeout_s: float = 10.0) -> dict[tuple[str, int], int | None]:
    """The committed offset (next offset to read) of consumer group ``group`` per partition;
    None where the group committed nothing. Reads only (``OffsetFetch``): never joins the group.

    Raises:
        KafkaException: the group coordinator did not answer (:func:`committed` retries).
    """
    tps = [TopicPartition(t, p) for t, p in partitions]
    if not tps:
        return {}
    c = Consumer({**client_config(bootstrap), "group.id": group, "enable.auto.commit": False})
    try:
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None)
                for tp in committed(c, tps, timeout_s)}
    finally:
        c.close()


def read_messages(bootstrap: KafkaTarget, topics: Iterable[str],
                  start: Mapping[str, Mapping[int, int]] | None = None, *,
                  timeout_s: float = 10.0, skip_missing: bool = False, newest: int | None = None,
                  extra_config: Mapping[str, Any] | None = None) -> list[Any]:
    """Every message (``confluent_kafka.Message``) of ``topics`` from ``start`` (topic ->
    partition -> offset; a partition absent there, or below its low watermark: from the low
    watermark) up to the high watermark as of the call, in (topic, partition, offset) order.
    ``newest`` bounds the read to about that many newest messages per topic: each of its P
    partitions is read from no earlier than ``high - ceil(newest / P)``, so the cost does not grow
    with the topic (a partition's unused share is not given to the others: under a skewed key
    spread the busiest partition's window is the shortest in time). Reads with ``assign`` under a throw-away group id and never commits: it
    changes nothing.

    Raises:
        KafkaException: a topic does not exist (unless ``skip_missing``) or the broker did not
            answer the metadata or watermark requests.
        TimeoutError: not every partition was read to its high watermark within ``timeout_s``
            (the message names the partitions left).
    """
    import uuid

    conf = {**client_config(bootstrap), "group.id": f"casestream-reader-{uuid.uuid4()}",
            "enable.auto.commit": False, "enable.partition.eof": False, **(extra_config or {})}
    c = Consumer(conf)
    try:
        md = c.list_topics(timeout=timeout_s)
        assign, ends = [], {}
        for t in topics:
            meta = md.topics.get(t)
            if meta is None or meta.error is not None:
                if skip_missing:
                    continue
                raise KafkaException(meta.error if meta is not None else f"unknown topic {t}")
            tail = -(-newest // len(meta.partitions)) if newest is not None and meta.partitions else None
            for p in sorted(meta.partitions):
                lo, hi = watermarks(c, TopicPartition(t, p), timeout_s)
                first = max(lo, (start or {}).get(t, {}).get(p, lo), hi - tail if tail is not None else lo)
                if hi > first:
                    assign.append(TopicPartition(t, p, first))
                    ends[(t, p)] = hi
        out: list[Any] = []
        if not assign:
            return out
        c.assign(assign)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                key = (m.topic(), m.partition())
                if m.error() is None and key in ends:
                    out.append(m)
                    if m.offset() + 1 >= ends[key]:
                        del ends[key]
        if ends:
            left = ", ".join(f"{t}[{p}]" for t, p in sorted(ends))
            raise TimeoutError(f"not read to the end in {timeout_s:g} s: {left}")
        out.sort(key=lambda m: (m.topic(), m.partition(), m.offset()))
        return out
    finally:
        c.close()


def partition_positions(bootstrap: KafkaTarget, group: str, topics: Iterable[str], timeout_s: float = 10.0
                        ) -> list[dict[str, Any]]:
    """Per partition of ``topics``: watermarks, ``group``'s committed offset, and the Kafka
    timestamps (ms) of the records at the low watermark and at the committed offset.

    Returns dicts with ``topic``, ``partition``, ``low``, ``high``, ``committed`` (None: the
    group committed nothing there), ``first_ts_ms`` (None: the partition holds no record) and
    ``committed_ts_ms`` (None: no record at or after the committed offset yet). Reads only: the
    group is never joined, nothing is committed.

    Raises:
        KafkaException: the cluster or the group coordinator did not answer, or a topic is unknown.
    """
    c = Consumer({**client_config(bootstrap), "group.id": group, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(timeout=timeout_s)
        tps: list[TopicPartition] = []
        for t in topics:
            meta = md.topics.get(t)
            if meta is None or meta.error is not None:
                raise KafkaException(meta.error if meta is not None else f"unknown topic {t}")
            tps.extend(TopicPartition(t, p) for p in sorted(meta.partitions))
        offsets = {(tp.topic, tp.partition): tp.offset for tp in committed(c, tps, timeout_s)}
        out = []
        wanted: dict[tuple[str, int, int], None] = {}
        for tp in tps:
            low, high = watermarks(c, tp, timeout_s)
            co = offsets[(tp.topic, tp.partition)]
            out.append({"topic": tp.topic, "partition": tp.partition, "low": low, "high": high,
                        "committed": co if co >= 0 else None})
            if high > low:
                wanted[(tp.topic, tp.partition, low)] = None
                if 0 <= co < high:
                    wanted[(tp.topic, tp.partition, max(co, low))] = None
        stamps = _timestamps_at(bootstrap, list(wanted), timeout_s)
        for row in out:
            key = (row["topic"], row["partition"])
            row["first_ts_ms"] = stamps.get((*key, row["low"])) if row["high"] > row["low"] else None
            co = row["committed"]
            row["committed_ts_ms"] = (stamps.get((*key, max(co, row["low"])))
                                      if co is not None and co < row["high"] else None)
        return out
    finally:
        c.close()


def _timestamps_at(bootstrap: KafkaTarget, positions: Sequence[tuple[str, int, int]], timeout_s: float
                   ) -> dict[tuple[str, int, int], int]:
    """Timestamp (ms) of the first record at or after each ``(topic, partition, offset)``."""
    out: dict[tuple[str, int, int], int] = {}
    for topic, partition, offset in positions:  # one assignment each: a position per partition
        c = Consumer({**client_config(bootstrap), "group.id": "casestream-retention-probe",
                      "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            c.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error() is None:
                    out[(topic, partition, offset)] = m.timestamp()[1]
                break  # a record, or end of partition: no record at or after the offset
        finally:
            c.close()
    return out


def topic_retention_ms(admin_config: dict[str, Any], topics: Iterable[str], timeout_s: float = 10.0
                       ) -> dict[str, int]:
    """Effective ``retention.ms`` of each existing topic (-1: kept forever).

    Raises:
        KafkaException: the broker did not answer.
    """
    found = describe_topic_configs(AdminClient(admin_config), topics, ["retention.ms"], timeout_s)
    return {t: int(v["retention.ms"]) for t, v in found.items() if "retention.ms" in v}
