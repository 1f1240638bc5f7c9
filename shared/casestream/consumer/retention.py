"""Inbox retention: purge inbox rows (and compact version-guard rows) no redelivery can need.

An inbox row ``(consumer, event_id)`` deduplicates a second delivery of that event. It can be
dropped once no copy of the event can reach the consumer again, which this module decides
from the broker, per partition of the consumer's topics (:func:`inbox_cutoff`, pure):

- nothing at or after the group's **committed offset**: a restart resumes there, so every
  record from it on is delivered again — rows processed at or after the timestamp of the
  record at the committed offset are kept (a partition where the group committed nothing,
  or committed below the low watermark, keeps everything: the cutoff is None);
- nothing newer than the topic's **retention**: a record still in the log can be read again
  (an offset reset, a second group member replaying its partitions) — rows processed after
  ``now - retention.ms`` or after the timestamp of the oldest record still in the
  partition are kept; a topic with ``retention.ms=-1`` keeps its whole history and every
  inbox row with it (cutoff None);
- a **dedup window** (``min_age_s``, default 7 days) bounds what a re-publication can
  duplicate: the relay produces a row again only around a crash or a broker outage
  (seconds to ``message.timeout.ms``), ``casestream outbox redrive`` of a timed-out row
  may re-send it later — within this window it is still deduplicated.

Timestamps are compared with ``processed_at`` minus ``margin_s`` (default 600 s): Kafka
timestamps are producer clocks (``CreateTime``) and a message retried inside librdkafka for
up to ``message.timeout.ms`` (300 s) can be appended after later-stamped ones.

Guard rows (``consumer_version_guard``) are one per aggregate. Compaction deletes the
``flowing`` rows not updated since the cutoff — only for a consumer whose first-seen policy
is ``BASELINE`` (``compact_guards=True``): the aggregate's next event is then taken as a new
baseline, while for a ``STRICT`` consumer it would look like a version gap, so a STRICT
consumer's guard rows are never compacted.

:class:`InboxRetention` runs purge and compaction every ``interval_s`` (a service worker;
``casestream inbox purge`` runs it once); it is idempotent (a rerun deletes nothing more
until the cutoff moves) and deletes in batches of ``batch`` rows, one transaction each.
Metrics: ``inbox_purged_total{consumer}``, ``guard_compacted_total{consumer}``,
``inbox_retention_cutoff_age_seconds{consumer}`` (0 while nothing may be purged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from casestream import telemetry
from casestream.kafka.config import KafkaTarget

__all__ = ["PartitionState", "Cutoff", "RetentionStats", "RetentionSettings", "inbox_cutoff",
           "purge_inbox", "compact_guards", "InboxRetention"]

log = logging.getLogger("casestream.consumer")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """One partition as the broker reports it (offsets; timestamps in ms since the epoch)."""

    topic: str
    partition: int
    low: int
    high: int
    committed: int | None
    first_ts_ms: int | None = None
    committed_ts_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Cutoff:
    """``at``: inbox rows processed before it may go (None: none may); ``reason``: what bounds it."""

    at: datetime | None
    reason: str


def _ms(ts_ms: int) -> datetime:
    return datetime.fromtimestamp(ts_ms / 1000.0, tz=timezone.utc)


def inbox_cutoff(consumer: str, partitions: Sequence[PartitionState], retention_ms: Mapping[str, int],
                 *, now: datetime, min_age_s: float, margin_s: float) -> Cutoff:
    """The newest ``processed_at`` an inbox row of ``consumer`` may have and still be purged
    (rules in the module docstring; ``retention_ms`` per topic, -1 = forever)."""
    if not partitions:
        return Cutoff(None, f"{consumer}: no partitions to judge by")
    margin = timedelta(seconds=margin_s)
    bounds: list[tuple[datetime, str]] = [(now - timedelta(seconds=min_age_s),
                                           f"dedup window {min_age_s:.0f} s")]
    for topic in sorted({p.topic for p in partitions}):
        keep = retention_ms.get(topic)
        if keep is None or keep < 0:
            return Cutoff(None, f"topic {topic} keeps its history forever (retention.ms="
                                f"{keep if keep is not None else 'unknown'}): any entry may be delivered again")
        bounds.append((now - timedelta(milliseconds=keep) - margin, f"{topic} retention.ms={keep}"))
    for p in partitions:
        name = f"{p.topic}[{p.partition}]"
        if p.high <= p.low:
            continue  # no record in the log: nothing of it can be delivered again
        if p.committed is None:
            return Cutoff(None, f"group {consumer} has no committed offset on {name}")
        if p.committed < p.low:
            return Cutoff(None, f"group {consumer} committed offset {p.committed} on {name} is below "
                                f"its low watermark {p.low}")
        if p.first_ts_ms is not None:
            bounds.append((_ms(p.first_ts_ms) - margin, f"oldest record of {name}"))
        if p.committed < p.high and p.committed_ts_ms is not None:
            bounds.append((_ms(p.committed_ts_ms) - margin, f"committed offset {p.committed} of {name}"))
        elif p.committed < p.high:
            return Cutoff(None, f"no timestamp for the record at the committed offset of {name}")
    at, why = min(bounds, key=lambda b: b[0])
    return Cutoff(at, why)


_PURGE = """
DELETE FROM consumer_inbox WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM consumer_inbox WHERE consumer = %(c)s AND processed_at < %(at)s LIMIT %(n)s))
"""
_COMPACT = """
DELETE FROM consumer_version_guard WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM consumer_version_guard
    WHERE consumer = %(c)s AND state = 'flowing' AND updated_at < %(at)s LIMIT %(n)s))
"""


def _delete_batches(conn: psycopg.Connection, statement: str, consumer: str, at: datetime,
                    batch: int) -> int:
    total = 0
    while True:
        with conn.transaction():
            n = conn.execute(statement, {"c": consumer, "at": at, "n": batch}).rowcount
        total += n
        if n < batch:
            return total


def purge_inbox(conn: psycopg.Connection, consumer: str, cutoff: datetime, *, batch: int = 10_000) -> int:
    """Delete ``consumer``'s inbox rows processed before ``cutoff``, ``batch`` rows per
    transaction (``conn`` in autocommit mode); return the number deleted."""
    return _delete_batches(conn, _PURGE, consumer, cutoff, batch)


def compact_guards(conn: psycopg.Connection, consumer: str, cutoff: datetime, *, batch: int = 10_000) -> int:
    """Delete ``consumer``'s ``flowing`` guard rows not updated since ``cutoff`` (BASELINE
    consumers only, see the module docstring); return the number deleted."""
    return _delete_batches(conn, _COMPACT, consumer, cutoff, batch)


@dataclass(slots=True)
class RetentionStats:
    """Counters of one consumer's retention job: rows purged and compacted since start, and
    the age in seconds of the last cutoff (0: nothing may be purged)."""

    purged: int = 0
    compacted: int = 0
    cutoff_age_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionSettings:
    """Tuning of :class:`InboxRetention` (seconds; ``batch`` rows per DELETE)."""

    interval_s: float = 600.0
    min_age_s: float = 7 * 86400.0
    margin_s: float = 600.0
    batch: int = 10_000


_STATS: dict[str, RetentionStats] = {}
_STATS_LOCK = threading.Lock()


def _observe(metric: str, attr: str) -> Any:
    def read() -> dict[tuple[tuple[str, str], ...], float]:
        with _STATS_LOCK:
            return {(("consumer", name),): float(getattr(s, attr)) for name, s in _STATS.items()}
    return read


def _register(consumer: str) -> RetentionStats:
    with _STATS_LOCK:
        stats = _STATS.setdefault(consumer, RetentionStats())
    src = telemetry.sources()
    src.add_gauge("inbox_purged_total", _observe("inbox_purged_total", "purged"))
    src.add_gauge("guard_compacted_total", _observe("guard_compacted_total", "compacted"))
    src.add_gauge("inbox_retention_cutoff_age_seconds",
                  _observe("inbox_retention_cutoff_age_seconds", "cutoff_age_s"))
    return stats


@dataclass(slots=True)
class RetentionRun:
    """One run's outcome: the cutoff and the rows deleted."""

    consumer: str
    cutoff: Cutoff
    purged: int = 0
    compacted: int = 0
    partitions: list[PartitionState] = field(default_factory=list)


class InboxRetention:
    """Purge the inbox (and compact guard rows) of consumers, now (:meth:`run_once`) or every
    ``settings.interval_s`` (:meth:`run`, a service worker).

    Args:
        dsn: the consumers' database URL.
        bootstrap: Kafka ``bootstrap.servers``.
        consumers: ``{consumer name (= group id): (topics, compact_guards)}``.
        settings: :class:`RetentionSettings`.
    """

    def __init__(self, dsn: str, bootstrap: KafkaTarget, consumers: Mapping[str, tuple[Iterable[str], bool]],
                 settings: RetentionSettings | None = None) -> None:
        self.dsn = dsn
        self.bootstrap = bootstrap
        self.consumers = {c: (tuple(t), g) for c, (t, g) in consumers.items()}
        self.settings = settings or RetentionSettings()
        self.stats = {c: _register(c) for c in self.consumers}

    def cutoff(self, consumer: str, now: datetime | None = None) -> tuple[Cutoff, list[PartitionState]]:
        """Ask the broker and decide ``consumer``'s cutoff (no deletes).

        Raises:
            KafkaException: the broker did not answer (the run is skipped, nothing deleted).
        """
        # lazy (start-up cost): the Kafka client loads when a run starts
        from casestream.kafka.config import admin_config
        from casestream.kafka.topics import partition_positions, topic_retention_ms

        topics, _ = self.consumers[consumer]
        states = [PartitionState(**row) for row in partition_positions(self.bootstrap, consumer, topics)]
        retention = topic_retention_ms(admin_config(self.bootstrap), topics)
        s = self.settings
        return (inbox_cutoff(consumer, states, retention, now=now or datetime.now(timezone.utc),
                             min_age_s=s.min_age_s, margin_s=s.margin_s), states)

    def run_once(self, *, dry_run: bool = False) -> list[RetentionRun]:
        """One purge (and compaction) per consumer; ``dry_run`` decides and counts, deletes nothing."""
        runs = []
        with psycopg.connect(self.dsn, autocommit=True,
                             application_name="casestream inbox retention") as conn:
            for consumer, (_topics, guards) in self.consumers.items():
                cut, states = self.cutoff(consumer)
                run = RetentionRun(consumer, cut, partitions=states)
                stats = self.stats[consumer]
                if cut.at is not None:
                    stats.cutoff_age_s = max(0.0, (datetime.now(timezone.utc) - cut.at).total_seconds())
                    if dry_run:
                        run.purged = conn.execute(
                            "SELECT count(*) FROM consumer_inbox WHERE consumer = %s AND processed_at < %s",
                            (consumer, cut.at)).fetchone()[0]
                        if guards:
                            run.compacted = conn.execute(
                                "SELECT count(*) FROM consumer_version_guard WHERE consumer = %s AND "
                                "state = 'flowing' AND updated_at < %s", (consumer, cut.at)).fetchone()[0]
                    else:
                        run.purged = purge_inbox(conn, consumer, cut.at, batch=self.settings.batch)
                        if guards:
                            run.compacted = compact_guards(conn, consumer, cut.at, batch=self.settings.batch)
                        stats.purged += run.purged
                        stats.compacted += run.compacted
                else:
                    stats.cutoff_age_s = 0.0
                log.info("inbox retention %s: cutoff %s (%s); %d inbox rows %s, %d guard rows %s",
                         consumer, cut.at.isoformat() if cut.at else "none", cut.reason, run.purged,
                         "to purge" if dry_run else "purged", run.compacted,
                         "to compact" if dry_run else "compacted")
                runs.append(run)
        return runs

    def run(self, stop: threading.Event) -> None:
        """Run :meth:`run_once` every ``interval_s`` until ``stop``; a failed run (broker or
        database away) is logged and retried at the next interval."""
        while not stop.wait(self.settings.interval_s):
            try:
                self.run_once()
            except Exception as e:  # noqa: BLE001 - KafkaException / psycopg.Error: retried next interval
                log.warning("inbox retention: run failed, retried in %.0f s: %s",
                            self.settings.interval_s, e)
