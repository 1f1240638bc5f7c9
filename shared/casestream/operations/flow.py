"""Flow read models: outbox backlog per service (from its ``/metrics``) and lag per
partition of a consumer group (from Kafka).

Sources:
- a service's Prometheus text: ``outbox_pending_total``, ``outbox_failed_total``,
  ``outbox_oldest_pending_age_seconds`` (labels ``relay``), ``dead_letter_open`` (``consumer``);
- Kafka: the group's committed offsets (``OffsetFetch``, the group is never joined) and each
  partition's high watermark. Lag = high watermark - committed offset (messages); a partition
  the group committed nothing on (or below its low watermark) counts from where the group
  would start, the first retained offset (``auto.offset.reset=earliest``): lag = high - low
  watermark. A casestream consumer commits its start positions when first assigned
  (:class:`~casestream.consumer.ConsumerRuntime`), so a group that stops before its first
  processed batch still shows the whole waiting log as lag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from casestream.kafka.config import KafkaTarget, client_config
from casestream.kafka.lag import read_group_partitions

__all__ = ["Samples", "parse_prometheus", "PartitionLag", "group_lag", "OutboxFlow", "outbox_flow",
           "sample_sum", "sample_max"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> Samples:
    """``{(name, sorted label pairs): value}`` of a Prometheus text exposition (comments skipped)."""
    out: Samples = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            continue
    return out


def sample_sum(samples: Samples, name: str) -> float | None:
    """Sum of the samples of metric ``name`` (None: no sample)."""
    values = [v for (n, _), v in samples.items() if n == name]
    return sum(values) if values else None


def sample_max(samples: Samples, name: str) -> float | None:
    """Largest sample of metric ``name`` (None: no sample)."""
    values = [v for (n, _), v in samples.items() if n == name]
    return max(values) if values else None


@dataclass(frozen=True, slots=True)
class OutboxFlow:
    """A service's outbox backlog (None = the service publishes no such metric)."""

    pending: float | None
    failed: float | None
    oldest_pending_s: float | None


def outbox_flow(metrics_text: str) -> OutboxFlow:
    s = parse_prometheus(metrics_text)
    return OutboxFlow(sample_sum(s, "outbox_pending_total"), sample_sum(s, "outbox_failed_total"),
                      sample_max(s, "outbox_oldest_pending_age_seconds"))


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a group: committed offset (None: none), high watermark, lag (messages)."""

    group: str
    topic: str
    partition: int
    committed: int | None
    high: int
    lag: int


def group_lag(bootstrap: KafkaTarget, group: str, topics: Sequence[str], *,
              timeout_s: float = 5.0) -> list[PartitionLag]:
    """Lag of ``group`` on every partition of those ``topics`` it has committed an offset on
    at least one partition of (the topics it consumes; topics that do not exist are left out).

    Raises:
        KafkaException: the cluster or the group coordinator did not answer.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import Consumer

    c = Consumer({**client_config(bootstrap), "group.id": group, "enable.auto.commit": False})
    try:
        parts = read_group_partitions(c, topics, timeout_s=timeout_s)
    finally:
        c.close()
    consumed = {p.topic for p in parts if p.committed is not None}
    return [PartitionLag(group, p.topic, p.partition, p.committed, p.high, p.lag)
            for p in parts if p.topic in consumed]
