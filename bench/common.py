"""Helpers shared by the benchmark scripts (run as ``python bench/<name>.py``, so this module
is importable as ``common`` from the script's own folder)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
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
    t = time.perf_counter()
    produce_encoded(bootstrap, topic, ((e.aggregate_id.encode(), codec.encode(e), headers_of(e))
                                       for e in evs), flush_s)
    return time.perf_counter() - t


def produce_encoded(bootstrap: str, topic: str, msgs: Iterable[tuple[bytes, bytes, Any]],
                    flush_s: float = 120.0) -> None:
    """Put ``msgs`` (key, value, headers) on ``topic``, idempotent with ``acks=all``, and wait
    for every delivery report.

    Raises:
        SystemExit: messages still undelivered after ``flush_s`` seconds.
    """
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.num.messages": 10000, "partitioner": "murmur2_random"})
    for key, value, headers in msgs:
        while True:
            try:
                p.produce(topic, key=key, value=value, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(flush_s):
        raise SystemExit("produce: messages left undelivered")


def infra_arguments(ap: Any) -> None:
    """Add ``--bootstrap`` (default ``CASESTREAM_KAFKA_BOOTSTRAP``, else 127.0.0.1:19092),
    ``--registry-url`` (default ``CASESTREAM_REGISTRY_URL``) and ``--dsn`` (default
    ``CASESTREAM_PG_URL`` + ``/casestream_test``) to the ``argparse`` parser ``ap``. Benches
    that write inbox and projection rows run in a database of their own on that server
    (:func:`own_database`)."""
    import os

    ap.add_argument("--bootstrap", default=os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP",
                                                          "127.0.0.1:19092"))
    ap.add_argument("--registry-url", default=os.environ.get("CASESTREAM_REGISTRY_URL"))
    ap.add_argument("--dsn", default=os.environ.get("CASESTREAM_PG_URL",
                                                    "postgresql://postgres@127.0.0.1:15432")
                    .rstrip("/") + "/casestream_test")


@contextlib.contextmanager
def own_database(dsn: str, name: str, *, keep: bool = False) -> Iterator[str]:
    """A database of its own, ``name``, on the server of ``dsn`` for one bench run: created
    empty, its DSN yielded, dropped afterwards unless ``keep``. The figures then do not depend
    on what earlier runs, tests or profile drivers left in a shared database (a development
    ``consumer_inbox`` of millions of rows makes every insert into it slower)."""
    import psycopg

    base = dsn.rsplit("/", 1)[0] if dsn.count("/") > 2 else dsn.rstrip("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        if not keep:
            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


PAIR_CHILD = "CASESTREAM_BENCH_PAIR_CHILD"
"""Set (to ``on`` / ``off``) in the two runs a ``--fast`` bench starts of itself."""


def durability(fast: bool) -> str:
    """Set libpq's ``PGOPTIONS`` for every connection this process opens (the bench's and the
    code under test's): ``synchronous_commit=on`` (production durability) unless ``fast``, then
    ``off``. Call before the first connection. Returns the label to print.

    With ``fast`` in the bench's own process, the figure with production durability is shown
    beside the fast one: the bench runs itself twice as child processes (the same arguments
    without ``--fast``, then with it), prints their output labelled, then both runs' numeric
    ``BENCH`` fields side by side (:func:`print_pair`), and this process exits with the worse
    exit status (``SystemExit``)."""
    import os

    if fast and not os.environ.get(PAIR_CHILD):
        raise SystemExit(run_pair())
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


def run_pair(argv: Sequence[str] | None = None) -> int:
    """Run this bench script (``sys.argv[0]``) twice: ``argv`` (default ``sys.argv[1:]``)
    without ``--fast`` (synchronous_commit=on), then with it; each line of their output
    printed prefixed ``[sync on]`` / ``[--fast]``; then :func:`print_pair` of their ``BENCH``
    records. Returns the larger exit status."""
    import os
    import subprocess
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    records: dict[str, dict[str, Any]] = {}
    status = 0
    for mode, label, args in (("on", "[sync on]", [a for a in argv if a != "--fast"]),
                              ("off", "[--fast] ", [*argv] if "--fast" in argv else [*argv, "--fast"])):
        proc = subprocess.Popen([sys.executable, sys.argv[0], *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, PAIR_CHILD: mode})
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"{label} {line}", end="", flush=True)
            if line.startswith("BENCH "):
                records[mode] = _json_loads(line[len("BENCH "):])
        status = max(status, proc.wait())
    print_pair(records.get("on", {}), records.get("off", {}))
    return status


def _json_loads(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def numeric_fields(record: Any, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a ``BENCH`` record, by dotted path (list items by index; the
    time and load average left out): ``{"rates.b4.0": 4948.0, ...}``."""
    out: dict[str, float] = {}
    if isinstance(record, dict):
        items = [(k, v) for k, v in record.items() if k not in ("at", "loadavg")]
    elif isinstance(record, list):
        items = [(str(i), v) for i, v in enumerate(record)]
    else:
        return out
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[path] = float(value)
        else:
            out.update(numeric_fields(value, path))
    return out


def print_pair(on: dict[str, Any], off: dict[str, Any]) -> None:
    """Print the numeric fields of the synchronous_commit=on and --fast records that differ
    side by side (with fast ÷ on), their load averages, and one ``BENCH`` record holding both."""
    import json

    a, b = numeric_fields(on), numeric_fields(off)
    print("\nsame bench, two runs: synchronous_commit=on (production durability) | --fast "
          "(synchronous_commit=off, NOT production durability)")
    print(f"  load average: on {on.get('loadavg', '?')} | fast {off.get('loadavg', '?')}")
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    same = len(set(a) | set(b)) - len(differ)
    width = max(map(len, differ), default=10)
    for key in differ:
        x, y = a.get(key), b.get(key)
        ratio = f"{y / x:.2f} ×" if x and y is not None else "-"
        print(f"  {key:<{width}}  on {_num(x):>12}  fast {_num(y):>12}  fast/on {ratio}")
    if same:
        print(f"  ({same} fields equal in both runs, the settings, not shown)")
    print("BENCH " + json.dumps({"bench": on.get("bench") or off.get("bench"),
                                 "pair": {"synchronous_commit_on": on, "fast": off}},
                                sort_keys=True))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3f}".rstrip("0").rstrip(".")


def proc_cpu_s(pid: int, children: bool = False) -> float:
    """utime + stime (+ reaped children's, with ``children``) of ``pid`` in seconds, 0 if gone."""
    import os
    from pathlib import Path

    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float:
    """CPU seconds of this stack's PostgreSQL (``deploy/infra.sh``'s, under
    ``CASESTREAM_LOCAL_DIR``, default ``.local``): the postmaster with its reaped children,
    plus its live children (the backends of open connections)."""
    import os
    from pathlib import Path

    local = Path(os.environ.get("CASESTREAM_LOCAL_DIR", Path(__file__).resolve().parents[1] / ".local"))
    pid = int((local / "pg" / "data" / "postmaster.pid").read_text().split()[0])
    total = proc_cpu_s(pid, children=True)
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    total += proc_cpu_s(int(p.name))
            except (OSError, IndexError, ValueError):
                continue
    return total
