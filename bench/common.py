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


def infra_arguments(ap: Any) -> None:
    """Add ``--bootstrap`` (default ``CASESTREAM_KAFKA_BOOTSTRAP``, else 127.0.0.1:19092),
    ``--registry-url`` (default ``CASESTREAM_REGISTRY_URL``) and ``--dsn`` (default
    ``CASESTREAM_PG_URL`` + ``/casestream_test``) to the ``argparse`` parser ``ap``."""
    import os

    ap.add_argument("--bootstrap", default=os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP",
                                                          "127.0.0.1:19092"))
    ap.add_argument("--registry-url", default=os.environ.get("CASESTREAM_REGISTRY_URL"))
    ap.add_argument("--dsn", default=os.environ.get("CASESTREAM_PG_URL",
                                                    "postgresql://postgres@127.0.0.1:15432")
                    .rstrip("/") + "/casestream_test")


def durability(fast: bool) -> str:
    """Set libpq's ``PGOPTIONS`` for every connection this process opens (the bench's and the
    code under test's): ``synchronous_commit=on`` (production durability) unless ``fast``, then
    ``off``. Call before the first connection. Returns the label to print."""
    import os

    mode = "off" if fast else "on"
    opts = os.environ.get("PGOPTIONS", "")
    os.environ["PGOPTIONS"] = f"{opts} -c synchronous_commit={mode}".strip()
    return f"synchronous_commit={mode}" + (" (--fast: NOT production durability)" if fast else "")


def check_durability(dsn: str, fast: bool) -> None:
    """Fail unless a connection of this process sees the intended ``synchronous_commit``."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        got = conn.execute("SHOW synchronous_commit").fetchone()[0]
    want = "off" if fast else "on"
    if got != want:
        raise SystemExit(f"synchronous_commit is {got!r} on the bench's connections, want {want!r}")


def load_average() -> str:
    """The 1/5/15-minute load average, e.g. ``"3.1 2.8 2.5"`` (the box is shared: say so)."""
    import os

    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def json_record(bench: str, **fields: Any) -> None:
    """Print the one-line JSON record of a bench run (``BENCH {...}``): name, UTC time, load
    average, and ``fields``."""
    import json
    import os
    from datetime import UTC, datetime

    rec = {"bench": bench, "at": datetime.now(UTC).isoformat(timespec="seconds"),
           "loadavg": [round(x, 2) for x in os.getloadavg()], **fields}
    print("BENCH " + json.dumps(rec, sort_keys=True))
