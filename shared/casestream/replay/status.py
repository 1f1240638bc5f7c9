"""``casestream replay --list``: each projection with its topics, tables and freshness.

Freshness = when the live tables last changed (the projection's ``freshness``) and the live
consumer's lag (high watermark minus the group's committed offset, summed over partitions);
an unfinished replay run is shown too. Unreachable databases/brokers are reported per row,
never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from casestream.replay import checkpoint
from casestream.replay.projection import known_projections, load_projection
from casestream.kafka.config import KafkaTarget, bootstrap_of, client_config


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectionStatus:
    """One row of ``--list``."""

    name: str
    description: str
    topics: tuple[str, ...]
    tables: tuple[str, ...]
    live_consumer: str
    freshness: datetime | None = None
    consumer_lag: int | None = None
    replay: str | None = None
    error: str | None = None
    lag_known: bool = True  # False: Kafka was unreachable, lag not asked

    def lines(self) -> list[str]:
        """Human-readable block."""
        fresh = self.freshness.isoformat(timespec="seconds") if self.freshness else "empty"
        lag = ("unknown (Kafka unreachable)" if not self.lag_known
               else "no committed offsets" if self.consumer_lag is None else str(self.consumer_lag))
        out = [f"{self.name}  — {self.description}",
               f"    topics: {', '.join(self.topics)}",
               f"    tables: {', '.join(self.tables)}; last change: {fresh}; "
               f"live consumer {self.live_consumer} lag: {lag}"]
        if self.replay:
            out.append(f"    unfinished replay: {self.replay}")
        if self.error:
            out.append(f"    error: {self.error}")
        return out


# librdkafka logs every failed connection attempt to stderr (hundreds of lines in a few
# seconds against a wrong address); the listing reports the broker's state in one line instead.
_KAFKA_LOG = logging.getLogger("casestream.replay.status.kafka")
_KAFKA_LOG.addHandler(logging.NullHandler())
_KAFKA_LOG.propagate = False


def kafka_problem(bootstrap: KafkaTarget, timeout_s: float = 5.0) -> str | None:
    """None if the brokers at ``bootstrap`` answer a metadata request within ``timeout_s``
    seconds, else one line saying why not."""
    # lazy (start-up cost): drivers load only when a status probe runs
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**client_config(bootstrap), "logger": _KAFKA_LOG})
    try:
        admin.list_topics(timeout=timeout_s)
        return None
    except KafkaException as e:
        return (f"Kafka at {bootstrap_of(bootstrap)} (CASESTREAM_KAFKA_BOOTSTRAP) did not answer within "
                f"{timeout_s:g} s: {e.args[0].str() if e.args else e}")


def consumer_lag(bootstrap: KafkaTarget, group: str, topics: tuple[str, ...]) -> int | None:
    """Sum over partitions of high watermark - committed offset of ``group`` (None if unknown)."""
    # lazy (start-up cost): drivers load only when a status probe runs
    from confluent_kafka import Consumer, TopicPartition

    from casestream.kafka.topics import committed

    c = Consumer({**client_config(bootstrap), "group.id": group,
                  "enable.auto.commit": False, "logger": _KAFKA_LOG})
    try:
        md = c.list_topics(timeout=5)
        tps = [TopicPartition(t, p) for t in topics if t in md.topics
               for p in md.topics[t].partitions]
        if not tps:
            return None
        lag, seen = 0, False
        for tp in committed(c, tps, 5.0):
            lo, hi = c.get_watermark_offsets(tp, timeout=5)
            seen = seen or tp.offset >= 0
            lag += hi - (tp.offset if tp.offset >= 0 else lo)
        return lag if seen else None
    except Exception:  # noqa: BLE001 - shown as unknown
        return None
    finally:
        c.close()


def project_status(bootstrap: KafkaTarget, dsns: Mapping[str, str] | None = None,
                   known: Mapping[str, str] | None = None, *,
                   with_lag: bool = True) -> list[ProjectionStatus]:
    """Status of every known projection (``known``: name -> reference, default the
    discovered ones); ``dsns`` overrides a projection's database URL; ``with_lag`` False
    skips the consumer lag (Kafka known to be unreachable)."""
    # lazy (start-up cost): drivers load only when a status probe runs
    import psycopg

    known = known_projections(known)
    out = []
    for name in known:
        try:
            spec = load_projection(name, known)
        except Exception as e:  # noqa: BLE001 - listed with its error
            out.append(ProjectionStatus(name=name, description="?", topics=(), tables=(),
                                        live_consumer="?", error=str(e)))
            continue
        fields: dict[str, Any] = {}
        try:
            dsn = (dsns or {}).get(name) or spec.dsn()
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                fields["freshness"] = spec.freshness(conn, spec.live_names())
                if conn.execute("SELECT to_regclass('replay_run')").fetchone()[0] is not None:
                    run = checkpoint.load_run(conn, name)
                    if run is not None:
                        fields["replay"] = (f"{run.state} from {run.from_spec} to {run.to_spec},"
                                            f" {run.events_applied} applied")
        except psycopg.errors.UndefinedTable:
            fields["error"] = (f"live table {', '.join(spec.tables)} missing (live consumer not "
                               f"wired or service never started)")
        except Exception as e:  # noqa: BLE001
            fields["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        out.append(ProjectionStatus(
            name=name, description=spec.description, topics=spec.topics, tables=spec.tables,
            live_consumer=spec.live_consumer,
            consumer_lag=(consumer_lag(bootstrap, spec.live_consumer, spec.topics)
                          if with_lag else None), lag_known=with_lag, **fields))
    return out
