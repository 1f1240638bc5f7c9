"""Fault injection and the reads an invariant checker needs, for soaks of services built on casestream.

Not used by services at run time. A soak (the suite's is ``services/soak.py``, ``make soak``)
drives load through a team's services while it calls these, then proves its invariants with
the read helpers:

- :func:`restart_infra` — ``deploy/infra.sh down <component>`` then ``up <component>`` (Kafka:
  the broker restarts; ``postgres``: ``pg_ctl stop -m fast``, every connection is cut);
- :func:`force_rebalance` — a transient member joins consumer group ``group`` (it never
  commits) and leaves once it has an assignment: two rebalances of the group;
- :func:`inject_poison` — a value that is not Avro on a topic, header ``id`` = ``poison-<uuid4>``;
- :func:`end_offsets`, :func:`read_since` — topic positions at the start and everything
  produced after them (what was published; what was dead-lettered);
- :func:`group_lag` — partitions whose committed offset is behind the log end, per group;
- :func:`inbox_size` — rows and bytes of a database's ``consumer_inbox``.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["end_offsets", "force_rebalance", "group_lag", "hold_rows", "hold_snapshot", "inbox_size",
           "inject_poison", "query", "read_since", "restart_infra"]


def restart_infra(script: Path, component: str, env: Mapping[str, str], *,
                  timeout_s: float = 300.0) -> None:
    """Stop and start ``component`` (``kafka``, ``postgres``, ...) with ``script`` (``deploy/infra.sh``).

    Raises:
        RuntimeError: a step exited non-zero (its stderr's tail is in the message).
    """
    for verb in ("down", "up"):
        done = subprocess.run([str(script), verb, component], env=dict(env), capture_output=True,
                              text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{script.name} {verb} {component}: {done.stderr[-300:]}")


def force_rebalance(bootstrap: str, group: str, topics: Sequence[str], *,
                    timeout_s: float = 30.0) -> bool:
    """Join ``group`` on ``topics`` with a member that never commits, leave once assigned.

    Returns True if the member got its assignment within ``timeout_s`` (it fetches messages but
    never processes them: the group resumes from its committed offsets).
    """
    from confluent_kafka import Consumer

    got = threading.Event()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "session.timeout.ms": 6000})
    try:
        c.subscribe(list(topics), on_assign=lambda _c, _ps: got.set())
        deadline = time.monotonic() + timeout_s
        while not got.is_set() and time.monotonic() < deadline:
            c.poll(0.2)
    finally:
        c.close()
    return got.is_set()


def inject_poison(bootstrap: str, topic: str, *, event_type: str = "CaseOpened",
                  timeout_s: float = 30.0) -> str:
    """Produce one message whose value is not Avro to ``topic``; returns its ``id`` header.

    Raises:
        RuntimeError: not delivered within ``timeout_s``.
    """
    from confluent_kafka import Producer

    pid = f"poison-{uuid.uuid4()}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, key=pid.encode(), value=b"not an Avro record: " + pid.encode(),
                     headers=[("id", pid.encode()), ("type", event_type.encode())])
    if producer.flush(timeout_s):
        raise RuntimeError(f"poison message to {topic} not delivered in {timeout_s:g} s")
    return pid


def end_offsets(bootstrap: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    """Log end offset of every partition of ``topics`` (topics that do not exist: absent)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-{uuid.uuid4()}"})
    try:
        md = c.list_topics(timeout=10)
        return {t: {p: c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                    for p in md.topics[t].partitions}
                for t in topics if t in md.topics}
    finally:
        c.close()


def read_since(bootstrap: str, topics: Sequence[str], start: Mapping[str, Mapping[int, int]],
               *, timeout_s: float = 60.0) -> list[Any]:
    """Every message (``confluent_kafka.Message``) of ``topics`` from the offsets ``start``
    (as :func:`end_offsets` returned them; a partition absent there: from its beginning) to
    the log end as of the call; topics that do not exist are skipped
    (:func:`casestream.kafka.topics.read_messages`).

    Raises:
        TimeoutError: not read to the end within ``timeout_s``.
    """
    from casestream.kafka.topics import read_messages

    return read_messages(bootstrap, topics, start, timeout_s=timeout_s, skip_missing=True)


def group_lag(bootstrap: str, groups: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """``"<group> <topic>[<partition>]"`` -> messages between its committed offset and the log
    end, for every partition of each group's topics that is behind (empty: none is)."""
    from confluent_kafka import Consumer, TopicPartition

    lag: dict[str, int] = {}
    for group, topics in groups.items():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False})
        try:
            md = c.list_topics(timeout=10)
            tps = [TopicPartition(t, p) for t in topics if t in md.topics
                   for p in md.topics[t].partitions]
            for tp in c.committed(tps, timeout=10):
                _lo, hi = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                  timeout=10)
                if hi > 0 and tp.offset < hi:
                    lag[f"{group} {tp.topic}[{tp.partition}]"] = hi - max(tp.offset, 0)
        finally:
            c.close()
    return lag


def query(dsn: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of one read-only statement on ``dsn`` (own connection, closed after)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]


def hold_snapshot(dsn: str, wait: Callable[[], Any]) -> int | None:
    """Hold a REPEATABLE READ snapshot on ``dsn`` (the vacuum horizon, ``xmin``) while
    ``wait()`` runs; the transaction's id (None if unknown). Rolled back after."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT txid_current()").fetchone()
        wait()
        conn.rollback()
    return int(row[0]) if row else None


def hold_rows(dsn: str, sql: str, wait: Callable[[], Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` (a ``SELECT ... FOR UPDATE``) on ``dsn`` and keep its row locks while
    ``wait()`` runs; the rows locked. Rolled back after."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = [tuple(r) for r in conn.execute(sql).fetchall()]
        wait()
        conn.rollback()
    return rows


def inbox_size(dsn: str) -> tuple[int, int]:
    """(rows, bytes incl. indexes and TOAST) of ``consumer_inbox`` in the database ``dsn``."""
    rows = query(dsn, "SELECT count(*), pg_total_relation_size('consumer_inbox') FROM consumer_inbox")
    return int(rows[0][0]), int(rows[0][1])
