"""Helpers shared by the benchmark scripts (run as ``python bench/<name>.py``, so this module
is importable as ``common`` from the script's own folder)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from casestream.testing.consumer import headers_of
from casestream.events.envelope import Envelope


def produce_all(bootstrap: str, topic: str, codec: Any, evs: Sequence[Envelope],
                flush_s: float = 120.0) -> float:
    """Put ``evs`` on ``topic`` (key = aggregate id, value = ``codec.encode``, envelope
    headers), idempotent with ``acks=all``; seconds until every delivery report is in.

    Raises:
        SystemExit: messages still undelivered after ``flush_s`` seconds.
    """
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.num.messages": 10000, "partitioner": "murmur2_random"})
    t = time.perf_counter()
    for e in evs:
        while True:
            try:
                p.produce(topic, key=e.aggregate_id.encode(), value=codec.encode(e),
                          headers=headers_of(e))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(flush_s):
        raise SystemExit("produce: messages left undelivered")
    return time.perf_counter() - t
