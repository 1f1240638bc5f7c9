"""Whole journeys: cases driven through the HTTP API of the running five-service suite.

The bench starts the suite's five services (case, decision, audit, notification, saga) as
processes with the project's own launcher (``tests.support.suite``: fresh databases for the
run on the local PostgreSQL, free HTTP ports, the local Kafka and registry of
``deploy/infra.sh``, rate limits raised so the bench is not throttled; the load shedding
limit, ``max_in_flight`` 32 per process, is the production default). Then, phase by phase,
it opens and submits cases (``POST /cases`` then ``POST /cases/{id}/submit`` with an
Idempotency-Key, the demo's case mix: a fifth decision failures, the rest violations and
no-violations alternating) with a bounded asynchronous client (httpx, at most ``--connections``
requests in flight):

- ``rate R`` (open loop): journey i is started at t0 + i / R whatever the answers; a start
  that finds every client slot taken is not sent and is counted as ``dropped``;
- ``saturation`` (closed loop): ``--concurrency`` N workers, each starts a journey and waits
  until its saga ended, then starts the next;
- ``submit-only`` (the same-run baseline): N workers open and submit cases without waiting
  for the journey: the HTTP edge alone, requests/s of the open+submit pair (run last, and
  its cases are drained before the bench ends).

A journey ends when the saga's last event (``SagaCompleted``, or ``SagaCompensated`` for a
decision failure) is in the audit journal; the bench reads the journal of its own database
every 100 ms. Journey latency = that event's ``occurred_at`` (set by the saga service in the
transaction that writes it to its outbox) minus the client's clock just before it sent the
submit request (one machine, one clock); ``CaseSubmitted → saga end`` (both from the audit
trail) is printed beside it. Journeys/s sustained = journeys whose saga ended within the
phase's clock, after its first 20%, divided by that time. A phase's journeys not ended
``--drain-s`` seconds after it are reported as ``unfinished`` and count as infinitely slow in
the percentiles.

Per stage (ms, p50/p95/p99 over the phase's events), from what the services record:
``occurred_at → topic`` per producing service (the Kafka record timestamp, ``published_at``
in the audit journal: set by the relay's producer), and ``topic → commit`` per consumer
(``consumer_inbox.processed_at`` of each service database, and the audit journal's
``recorded_at``: both PostgreSQL ``now()``, the start of the consumer's transaction).

CPU seconds per process over each phase (``/proc/<pid>/stat`` utime + stime, the process and
its descendants, a descendant that is itself listed counted under its own name only): the five
services, PostgreSQL (the postmaster and its backends), Kafka, the registry and the bench's own
client (without the service processes it started); the service with the most is named the
bottleneck. CPU ms per journey (each process's CPU seconds ÷ journeys sustained × the phase's
clock; the suite without the bench) and the journeys/s the box's cores would carry at that cost
are printed for the saturation phase (closed loop, so at steady state).
``--profile SERVICE`` samples that service with py-spy during the saturation phase and prints
where its time goes (``--profile auto``: the busiest service of the previous phase).

Every connection runs with ``synchronous_commit=on`` (libpq ``PGOPTIONS``, inherited by the
service processes) unless ``--fast``. The 2-core box is shared: the load average is printed
with every phase, and a one-line ``BENCH {...}`` JSON record ends the run. Run it alone (it
starts service processes): ``flock /tmp/casestream-e2e.lock make bench-journeys``.

Usage::

    eval "$(deploy/infra.sh env)"
    .venv/bin/python bench/journeys.py [--rates 25,50,100] [--seconds 20] [--concurrency 64]
        [--connections 24] [--drain-s 30] [--profile auto|SERVICE] [--fast]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # services.demo and tests.support: the project's launcher

from common import check_durability, durability, json_record, load_average  # noqa: E402

END_TYPES = ("SagaCompleted", "SagaCompensated")
"""The saga's last event of a journey (compensated: the decision failed, the case returned)."""

WARMUP_SHARE = 0.2
"""Share of a phase's clock left out of journeys/s sustained (the pipeline filling up)."""


# --- statistics (pure) ---------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by the nearest-rank method (the smallest
    value with at least q% of the values at or below it); ``math.inf`` entries stand for
    journeys that never ended. NaN for no values.

    Raises:
        ValueError: ``q`` outside 0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float | int]:
    """``{"n", "p50", "p95", "p99", "max"}`` of durations given in seconds, in ms (inf kept)."""
    out: dict[str, float | int] = {"n": len(values_s)}
    for q in (50, 95, 99):
        out[f"p{q}"] = percentile(values_s, q) * 1000
    out["max"] = max(values_s) * 1000 if values_s else math.nan
    return out


def sustained_rate(ends: Iterable[float], start: float, stop: float,
                   warmup_share: float = WARMUP_SHARE) -> float:
    """Journeys/s that ended within ``[start + warmup_share × (stop - start), stop]`` (epoch
    seconds), divided by that window's length.

    Raises:
        ValueError: ``stop <= start`` or ``warmup_share`` outside [0, 1).
    """
    if stop <= start or not 0 <= warmup_share < 1:
        raise ValueError(f"sustained_rate needs start < stop and 0 <= warmup_share < 1, got "
                         f"{start}, {stop}, {warmup_share}")
    begin = start + warmup_share * (stop - start)
    return sum(begin <= t <= stop for t in ends) / (stop - begin)


def fmt_ms(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def json_safe(d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` with inf/NaN turned into None (JSON has neither)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else
                round(v, 2) if isinstance(v, float) else v) for k, v in d.items()}


# --- CPU per process -----------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float]]:
    """``{pid: (ppid, utime + stime in s)}`` of every process readable in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return out


def tree_cpu(roots: Mapping[str, int], table: Mapping[int, tuple[int, float]] | None = None
             ) -> dict[str, float]:
    """CPU seconds (user + system) so far of each named root pid and its live descendants,
    a descendant that is itself a named root (and its subtree) counted under its own name
    only: the services are children of the bench's process, and the bench's figure must be
    its own client's, not the suite's."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    named = set(roots.values())
    out = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in table:
                total += table[pid][1]
                todo.extend(c for c in children.get(pid, ()) if c not in named)
        out[name] = total
    return out


def infra_pids(local: Path) -> dict[str, int]:
    """The pids of this checkout's PostgreSQL, Kafka and registry (``deploy/infra.sh`` state
    in ``.local``), those that are running."""
    files = {"postgres": local / "pg" / "data" / "postmaster.pid",
             "kafka": local / "kafka" / "kafka.pid",
             "registry": local / "apicurio" / "registry.pid"}
    out = {}
    for name, path in files.items():
        try:
            pid = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if Path(f"/proc/{pid}").exists():
            out[name] = pid
    return out


# --- work counters: Kafka requests, PostgreSQL transactions and statements -----------------

def kafka_segments(pids: Mapping[str, int], port: int) -> dict[str, int]:
    """TCP data segments each named process has sent so far to the broker on ``port``
    (``ss -tinp``'s ``data_segs_out`` summed over its open connections): a Kafka request of
    a few kB is one segment, so this counts a client's requests (fetch, produce, heartbeat,
    offset commit, metadata) without JMX. Connections closed meanwhile are not counted."""
    try:
        text = subprocess.run(["ss", "-tinpH", "state", "established", f"( dport = :{port} )"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    by_pid = segments_by_pid(text)
    return {name: by_pid.get(pid, 0) for name, pid in pids.items()}


def segments_by_pid(ss_output: str) -> dict[int, int]:
    """``{pid: data_segs_out summed over its connections}`` from ``ss -tinpH`` output (per
    connection a line naming ``users:(("name",pid=N,fd=M))``, then an indented line of TCP
    counters; a connection without ``data_segs_out`` has sent no data)."""
    import re

    out: dict[int, int] = defaultdict(int)
    for block in re.split(r"\n(?=\S)", ss_output):
        pid = re.search(r"pid=(\d+)", block)
        segs = re.search(r"data_segs_out:(\d+)", block)
        if pid and segs:
            out[int(pid.group(1))] += int(segs.group(1))
    return dict(out)


def pg_counters(dsns: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """``{service: {"xacts", "rows_written", "backend_cpu_ms"}}`` so far from
    ``pg_stat_database`` and ``pg_stat_user_tables`` of each service database (the statistics
    a backend flushes at most once a second: read them a second after the load), and the CPU
    of the backends connected to it now (``/proc``: a backend that ended meanwhile is lost,
    one that started is counted whole; the services' pools keep theirs)."""
    import psycopg

    out: dict[str, dict[str, int]] = {}
    for service, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            xacts = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database"
                                 " WHERE datname = current_database()").fetchone()[0]
            rows = conn.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)"
                                " FROM pg_stat_user_tables").fetchone()[0]
            pids = [r[0] for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()")]
            table = _proc_table()
            cpu_ms = sum(table[pid][1] for pid in pids if pid in table) * 1000
            out[service] = {"xacts": int(xacts), "rows_written": int(rows),
                            "backend_cpu_ms": int(cpu_ms)}
    return out


def statement_counts(log: Path, offset: int, databases: Mapping[str, str]
                     ) -> tuple[dict[str, Counter[str]], int]:
    """Statements per service and per statement text (literals kept, whitespace folded; the
    first 90 characters) that PostgreSQL logged (``log_min_duration_statement = 0`` on the
    bench's databases, ``log_line_prefix`` '%m [%p] %d ') after byte ``offset`` of ``log``;
    and the log's new end. Extended protocol: the ``execute`` step is counted, not parse/bind."""
    import re

    by_db = {db: service for service, db in databases.items()}
    out: dict[str, Counter[str]] = {s: Counter() for s in databases}
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    pat = re.compile(r"^\S+ \S+ UTC \[\d+\] (\S+) LOG:  duration: [\d.]+ ms  "
                     r"(?:statement: |execute [^:]*: )(.*)$")
    for line in data.decode("utf-8", "replace").splitlines():
        m = pat.match(line)
        if m and (service := by_db.get(m.group(1))) is not None:
            out[service][" ".join(m.group(2).split())[:90]] += 1
    return out, offset + len(data)


# --- the load ------------------------------------------------------------------------------

@dataclass(slots=True)
class Started:
    """One journey the client started: case id and client clocks (epoch s)."""

    case_id: str
    submit_sent: float
    submit_answered: float


@dataclass(slots=True)
class Phase:
    """What a phase did: its journeys, its clock (epoch s), and what went wrong."""

    name: str
    started: list[Started] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    t0: float = 0.0
    t1: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    load: str = ""
    kafka_segs: dict[str, int] = field(default_factory=dict)
    pg: dict[str, dict[str, int]] = field(default_factory=dict)
    statements: dict[str, Counter[str]] = field(default_factory=dict)


class JourneyWatch:
    """Reads the audit journal every ``interval_s`` for saga ends of the cases it was told
    about; ``ends[case_id]`` = the end event's ``occurred_at`` (epoch s), and an awaitable
    per case.

    Each read takes the end events recorded since the previous read's clock minus
    ``overlap_s`` (``recorded_at`` is the start of the audit consumer's transaction, which
    commits later), so its cost follows the rate of ends, not the number of cases waited for.
    """

    def __init__(self, audit_dsn: str, interval_s: float = 0.1, overlap_s: float = 5.0) -> None:
        self.dsn = audit_dsn
        self.interval_s = interval_s
        self.overlap_s = overlap_s
        self.ends: dict[str, float] = {}
        self._waiting: dict[str, asyncio.Event] = {}
        self._pending: set[str] = set()

    def watch(self, case_id: str) -> asyncio.Event:
        if case_id not in self.ends:
            self._pending.add(case_id)
        return self._waiting.setdefault(case_id, asyncio.Event())

    async def run(self, stop: asyncio.Event) -> None:
        import psycopg

        since = 0.0
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            while not stop.is_set():
                now = float((await (await conn.execute(
                    "SELECT extract(epoch FROM clock_timestamp())")).fetchone())[0])
                rows = await (await conn.execute(
                    "SELECT case_id, extract(epoch FROM occurred_at) FROM audit_journal"
                    " WHERE event_type = ANY(%s) AND recorded_at >= to_timestamp(%s)",
                    (list(END_TYPES), since))).fetchall()
                since = now - self.overlap_s
                for case_id, at in rows:
                    if case_id in self._pending:
                        self.ends[case_id] = float(at)
                        self._pending.discard(case_id)
                        if (ev := self._waiting.pop(case_id, None)) is not None:
                            ev.set()
                try:
                    await asyncio.wait_for(stop.wait(), self.interval_s)
                except TimeoutError:
                    pass

    def pending(self) -> int:
        return len(self._pending)


class Driver:
    """Opens and submits cases over HTTP, at most ``connections`` requests in flight."""

    def __init__(self, base: str, connections: int) -> None:
        import httpx

        from services.demo import case_mix

        self.base = base
        self.slots = asyncio.Semaphore(connections)
        self.client = httpx.AsyncClient(
            timeout=30.0, limits=httpx.Limits(max_connections=connections,
                                              max_keepalive_connections=connections))
        self.mix = case_mix(100)
        self.n = 0
        self._auth: dict[str, dict[str, str]] = {}

    def auth(self, tenant: str) -> dict[str, str]:
        """The bearer header of ``tenant``, minted once per run: minting reads the auth
        settings from the environment (pydantic-settings, ~1 ms of CPU), which per request
        made this client, not the suite, the busiest process."""
        from services.demo import headers

        if tenant not in self._auth:
            self._auth[tenant] = headers(tenant)
        return self._auth[tenant]

    async def start(self, phase: Phase) -> Started | None:
        """Open and submit one case; None (error counted) when the service refused."""
        import httpx

        spec = self.mix[self.n % len(self.mix)]
        self.n += 1
        async with self.slots:
            try:
                opened = await self.client.post(f"{self.base}/cases", json=spec.body(),
                                                headers=self.auth(spec.tenant))
                if opened.status_code != 201:
                    phase.errors[f"open {opened.status_code}"] += 1
                    return None
                case_id = opened.json()["id"]
                sent = time.time()
                submitted = await self.client.post(
                    f"{self.base}/cases/{case_id}/submit", json={},
                    headers={**self.auth(spec.tenant), "Idempotency-Key": str(uuid.uuid4())})
                answered = time.time()
            except httpx.HTTPError as e:
                phase.errors[type(e).__name__] += 1
                return None
        if submitted.status_code >= 300:
            phase.errors[f"submit {submitted.status_code}"] += 1
            return None
        started = Started(case_id, sent, answered)
        phase.started.append(started)
        return started

    async def close(self) -> None:
        await self.client.aclose()


async def open_loop(driver: Driver, watch: JourneyWatch, phase: Phase, rate: float,
                    seconds: float) -> None:
    """Start ``rate`` journeys/s for ``seconds`` on schedule (an arrival that finds no free
    client slot is dropped and counted), then wait for the answers."""
    loop = asyncio.get_running_loop()
    tasks = []
    t0 = loop.time()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, t0 + i / rate - loop.time()))
        if driver.slots.locked():
            phase.dropped += 1
            continue
        tasks.append(asyncio.create_task(_start_watched(driver, watch, phase)))
    await asyncio.sleep(max(0.0, t0 + seconds - loop.time()))
    await asyncio.gather(*tasks)


async def _start_watched(driver: Driver, watch: JourneyWatch, phase: Phase) -> None:
    if (s := await driver.start(phase)) is not None:
        watch.watch(s.case_id)


async def closed_loop(driver: Driver, watch: JourneyWatch, phase: Phase, workers: int,
                      seconds: float, wait_journey: bool) -> None:
    """``workers`` loops for ``seconds``: start a journey, then (``wait_journey``) wait until
    its saga ended."""
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < deadline:
            s = await driver.start(phase)
            if s is None:
                await asyncio.sleep(0.05)
                continue
            done = watch.watch(s.case_id)
            if wait_journey:
                try:
                    await asyncio.wait_for(done.wait(), max(0.01, deadline - time.monotonic()))
                except TimeoutError:
                    return

    await asyncio.gather(*(worker() for _ in range(workers)))


# --- what the services recorded ------------------------------------------------------------

def journey_report(phase: Phase, ends: Mapping[str, float],
                   submitted_at: Mapping[str, float]) -> dict[str, Any]:
    """Latencies and rate of ``phase`` from the saga ends (``ends``: case id → epoch s) and
    the audit trail's ``CaseSubmitted`` times (``submitted_at``)."""
    lat = [ends.get(s.case_id, math.inf) - s.submit_sent for s in phase.started]
    inner = [ends[s.case_id] - submitted_at[s.case_id] for s in phase.started
             if s.case_id in ends and s.case_id in submitted_at]
    http = [s.submit_answered - s.submit_sent for s in phase.started]
    mine = [ends[s.case_id] for s in phase.started if s.case_id in ends]
    return {"started": len(phase.started),
            "ended": sum(s.case_id in ends for s in phase.started),
            "per_s": sustained_rate(mine, phase.t0, phase.t1) if phase.t1 > phase.t0 else 0.0,
            "journey_ms": summary_ms(lat), "submitted_to_end_ms": summary_ms(inner),
            "submit_http_ms": summary_ms(http)}


def stage_latencies(dsns: Mapping[str, str], case_ids: Sequence[str]) -> dict[str, list[float]]:
    """Seconds per stage over the events of ``case_ids`` (module docstring): ``"<service>
    occurred → topic"`` and ``"topic → <consumer> commit"``."""
    import psycopg

    stages: dict[str, list[float]] = defaultdict(list)
    published: dict[str, float] = {}
    with psycopg.connect(dsns["audit"]) as conn:
        rows = conn.execute(
            "SELECT event_id::text, source, extract(epoch FROM occurred_at),"
            " extract(epoch FROM published_at), extract(epoch FROM recorded_at)"
            " FROM audit_journal WHERE case_id = ANY(%s)", (list(case_ids),)).fetchall()
    for event_id, source, occurred, pub, recorded in rows:
        if pub is None:
            continue
        published[event_id] = float(pub)
        stages[f"{source} occurred → topic"].append(float(pub) - float(occurred))
        stages["topic → audit-journal commit"].append(float(recorded) - float(pub))
    ids = list(published)
    for service, dsn in dsns.items():
        with psycopg.connect(dsn) as conn:
            for consumer, event_id, at in conn.execute(
                    "SELECT consumer, event_id, extract(epoch FROM processed_at)"
                    " FROM consumer_inbox WHERE event_id = ANY(%s)", (ids,)):
                stages[f"topic → {consumer} commit"].append(float(at) - published[event_id])
    return dict(stages)


def submitted_times(audit_dsn: str, case_ids: Sequence[str]) -> dict[str, float]:
    import psycopg

    with psycopg.connect(audit_dsn) as conn:
        return {c: float(t) for c, t in conn.execute(
            "SELECT case_id, extract(epoch FROM occurred_at) FROM audit_journal"
            " WHERE event_type = 'CaseSubmitted' AND case_id = ANY(%s)", (list(case_ids),))}


# --- profile -------------------------------------------------------------------------------

def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start py-spy sampling ``pid`` for ``seconds`` (raw collapsed stacks to ``out``)."""
    exe = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(exe), "record", "--pid", str(pid), "--duration",
                             str(max(1, int(seconds))), "--rate", "50", "--format", "raw",
                             "--threads", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_shares(collapsed: str, top: int = 12) -> tuple[list[tuple[str, float]],
                                                             list[tuple[str, float]]]:
    """From py-spy's raw collapsed stacks (``frame;frame;... count`` per line): the ``top``
    leaf frames by share of samples, and the ``top`` frames of casestream/services code by
    inclusive share (the stack they are on), both as ``(frame, share 0..1)``."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if not f.startswith("thread (")
                  and not f.startswith("process ")]
        if frames:
            leaf[frames[-1]] += n
        for f in set(frames):
            if "casestream/" in f or "services/" in f:
                inclusive[f] += n
    if not total:
        return [], []
    return ([(f, c / total) for f, c in leaf.most_common(top)],
            [(f, c / total) for f, c in inclusive.most_common(top)])


# --- the run -------------------------------------------------------------------------------

def print_phase(phase: Phase, rep: Mapping[str, Any], stages: Mapping[str, list[float]]) -> None:
    j, inner, http = rep["journey_ms"], rep["submitted_to_end_ms"], rep["submit_http_ms"]
    errs = ", ".join(f"{k} ×{v}" for k, v in sorted(phase.errors.items())) or "none"
    print(f"\n== {phase.name}: {rep['started']} journeys started, {rep['ended']} ended, "
          f"{rep['started'] - rep['ended']} unfinished; dropped {phase.dropped}; "
          f"refused/failed {errs}; load average {phase.load}")
    print(f"   journeys/s sustained: {rep['per_s']:.1f}")
    for label, s in (("journey (submit sent → saga end)", j),
                     ("CaseSubmitted → saga end (audit)", inner),
                     ("submit HTTP answer", http)):
        print(f"   {label:<36} p50 {fmt_ms(s['p50'])}  p95 {fmt_ms(s['p95'])}  "
              f"p99 {fmt_ms(s['p99'])}  max {fmt_ms(s['max'])} ms")
    if stages:
        print(f"   {'stage':<44} {'n':>6} {'p50':>7} {'p95':>7} {'p99':>7} ms")
        for name in sorted(stages):
            s = summary_ms(stages[name])
            print(f"   {name:<44} {s['n']:>6} {fmt_ms(s['p50']):>7} {fmt_ms(s['p95']):>7} "
                  f"{fmt_ms(s['p99']):>7}")
    span = max(phase.t1 - phase.t0, 1e-9)
    cpu = sorted(phase.cpu_s.items(), key=lambda kv: -kv[1])
    print("   CPU s over the phase (share of one core): " + ", ".join(
        f"{k} {v:.1f} ({v / span:.0%})" for k, v in cpu))
    print(f"   bottleneck (busiest service): {busiest(phase.cpu_s)}")
    if phase.cpu_s.get("bench", 0.0) / span > 0.8:
        print(f"   NOTE: the bench's own client used {phase.cpu_s['bench'] / span:.0%} of a core: "
              "the load generator, not the suite, limits this phase")


def cpu_per_journey(cpu_s: Mapping[str, float], per_s: float, span_s: float,
                    exclude: Iterable[str] = ("bench",)) -> dict[str, float]:
    """CPU ms per journey of each process (and ``total``) over a phase at steady state: its CPU
    seconds ÷ (journeys/s sustained × the phase's clock, s). ``exclude``: not the suite (the
    bench's client and its py-spy). {} when no journey was sustained."""
    journeys_in_clock = per_s * span_s
    if journeys_in_clock <= 0:
        return {}
    left_out = set(exclude)
    out = {k: v * 1000 / journeys_in_clock for k, v in cpu_s.items() if k not in left_out}
    out["total"] = sum(out.values())
    return out


def journeys_ceiling(total_ms: float, cores: int) -> float:
    """Journeys/s that ``cores`` fully given to the suite carry at ``total_ms`` CPU per journey."""
    return cores * 1000 / total_ms if total_ms > 0 else math.inf


def print_cpu_per_journey(per_journey: Mapping[str, float]) -> None:
    if not per_journey:
        return
    cores = os.cpu_count() or 1
    parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per_journey.items(), key=lambda kv: -kv[1])
                      if k != "total")
    print(f"   CPU per journey (ms, the suite without the bench): total {per_journey['total']:.1f}: "
          f"{parts}; {cores} cores carry at most "
          f"{journeys_ceiling(per_journey['total'], cores):.1f} journeys/s at this cost")


def busiest(cpu_s: Mapping[str, float]) -> str:
    from services.demo import SUITE

    services = {k: v for k, v in cpu_s.items() if k in SUITE}
    return max(services, key=services.__getitem__) if services else "-"


async def run_phases(args: argparse.Namespace, base: str, dsns: Mapping[str, str],
                     roots: Mapping[str, int]) -> list[tuple[Phase, dict[str, Any]]]:
    from services.demo import SUITE

    kafka_port = int(os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
                     .split(",")[0].rsplit(":", 1)[1])
    pg_log = REPO / ".local" / "pg" / "postgres.log"
    dbs = {k: v.rsplit("/", 1)[1] for k, v in dsns.items()}
    watch = JourneyWatch(dsns["audit"])
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch.run(stop))
    driver = Driver(base, args.connections)
    results: list[tuple[Phase, dict[str, Any]]] = []
    profile_target = args.profile
    try:
        plan: list[tuple[str, Any]] = [(f"rate {r:g}/s", r) for r in args.rates]
        if args.concurrency:
            plan.append((f"saturation ({args.concurrency} concurrent)", "closed"))
            plan.append((f"submit-only baseline ({args.connections} concurrent)", "submit"))
        for name, mode in plan:
            phase = Phase(name)
            spy = None
            if mode == "closed" and profile_target:
                target = (busiest(results[-1][0].cpu_s) if profile_target == "auto" and results
                          else profile_target)
                spies = []
                for t in (list(SUITE) if target == "all" else [target]):
                    if t in roots:
                        spy_out = Path(tempfile.gettempdir()) / f"journeys-{t}-{os.getpid()}.txt"
                        spies.append((t, spy_out, py_spy(roots[t], args.seconds, spy_out)))
                spy = spies or None
            suite_pids = {k: v for k, v in roots.items() if k in SUITE}
            segs_before = kafka_segments(suite_pids, kafka_port)
            pg_before = pg_counters(dsns)
            if args.log_statements:
                log_offset = pg_log.stat().st_size
            before = tree_cpu(roots)
            phase.t0 = time.time()
            if mode == "closed":
                await closed_loop(driver, watch, phase, args.concurrency, args.seconds, True)
            elif mode == "submit":
                await closed_loop(driver, watch, phase, args.connections, args.seconds, False)
            else:
                await open_loop(driver, watch, phase, mode, args.seconds)
            phase.t1 = time.time()
            after = tree_cpu(roots)
            phase.cpu_s = {k: after[k] - before.get(k, 0.0) for k in after}
            phase.load = load_average()
            segs_after = kafka_segments(suite_pids, kafka_port)
            phase.kafka_segs = {k: segs_after[k] - segs_before.get(k, 0) for k in segs_after}
            if args.log_statements:
                phase.statements, _ = statement_counts(pg_log, log_offset, dbs)
            pg_cpu = pg_counters(dsns)  # backend CPU at the phase's end
            await asyncio.sleep(1.1)  # backends flush their statistics at most once a second
            pg_after = {k: {**v, "backend_cpu_ms": pg_cpu[k]["backend_cpu_ms"]}
                        for k, v in pg_counters(dsns).items()}
            phase.pg = {k: {c: pg_after[k][c] - pg_before[k][c] for c in pg_after[k]}
                        for k in pg_after}
            drain_until = time.monotonic() + args.drain_s
            ids = {s.case_id for s in phase.started}
            while time.monotonic() < drain_until and any(i not in watch.ends for i in ids):
                await asyncio.sleep(0.2)
            ids_list = sorted(ids)
            rep = journey_report(phase, watch.ends, submitted_times(dsns["audit"], ids_list))
            if mode == "submit":  # the baseline's figure is the HTTP pair, not the journey
                rep["per_s"] = len(phase.started) / (phase.t1 - phase.t0)
            stages = stage_latencies(dsns, ids_list)
            rep["stages_ms"] = {k: json_safe(summary_ms(v)) for k, v in stages.items()}
            print_phase(phase, rep, stages)
            if mode == "closed":  # steady state: in an open-loop phase that queues up, the
                # work of journeys still under way would be charged to fewer ends
                rep["cpu_ms_per_journey"] = cpu_per_journey(phase.cpu_s, rep["per_s"], phase.t1 - phase.t0)
                print_cpu_per_journey(rep["cpu_ms_per_journey"])
            if mode == "submit":
                print(f"   (baseline: {rep['per_s']:.1f} open+submit pairs/s through the HTTP "
                      "edge, not waiting for the journeys)")
            if mode == "closed":
                print_budget(phase, rep["per_s"] * (phase.t1 - phase.t0))
                rep["budget"] = budget(phase, rep["per_s"] * (phase.t1 - phase.t0))
            if spy is not None:
                for one in spy:
                    print_profile(*one)
            results.append((phase, rep))
            sys.stdout.flush()
    finally:
        stop.set()
        await watcher
        await driver.close()
    return results


def budget(phase: Phase, journeys: float) -> dict[str, dict[str, float]]:
    """Per service, per journey: Kafka requests (TCP segments to the broker), PostgreSQL
    transactions, rows written, CPU ms of its database's backends, statements (with
    ``--log-statements``) and the service process's CPU ms;
    ``journeys``: the journeys the phase's clock sustained. {} when none."""
    if journeys <= 0:
        return {}
    out: dict[str, dict[str, float]] = {}
    for name in sorted(set(phase.kafka_segs) | set(phase.pg)):
        row = {"kafka_requests": phase.kafka_segs.get(name, 0) / journeys,
               "pg_xacts": phase.pg.get(name, {}).get("xacts", 0) / journeys,
               "rows_written": phase.pg.get(name, {}).get("rows_written", 0) / journeys,
               "pg_backend_ms": phase.pg.get(name, {}).get("backend_cpu_ms", 0) / journeys,
               "cpu_ms": phase.cpu_s.get(name, 0.0) * 1000 / journeys}
        if phase.statements:
            row["statements"] = sum(phase.statements.get(name, Counter()).values()) / journeys
        out[name] = row
    return out


def print_budget(phase: Phase, journeys: float) -> None:
    rows = budget(phase, journeys)
    if not rows:
        return
    cols = list(next(iter(rows.values())))
    print("   per journey:      " + "".join(f"{c:>16}" for c in cols))
    totals = {c: sum(r[c] for r in rows.values()) for c in cols}
    for name, row in [*rows.items(), ("total", totals)]:
        print(f"     {name:<16}" + "".join(f"{row[c]:>16.1f}" for c in cols))
    for name, counts in sorted(phase.statements.items()):
        for text, n in counts.most_common(12):
            print(f"     {name:<12} {n / journeys:7.2f}/journey  {text}")


def print_profile(target: str, out: Path, proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    if not out.exists():
        print(f"   profile of {target}: py-spy wrote nothing (exit {proc.returncode})")
        return
    leaves, inclusive = profile_shares(out.read_text())
    print(f"   profile of {target} (py-spy, 50 Hz, all threads incl. idle; stacks in {out}):")
    print("     leaf frames:")
    for f, share in leaves:
        print(f"       {share:6.1%}  {f}")
    print("     casestream/services frames, inclusive:")
    for f, share in inclusive:
        print(f"       {share:6.1%}  {f}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/journeys.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="25,50,100",
                    help="open-loop phases, journeys/s, comma-separated (default 25,50,100; "
                         "'' for none)")
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="length of each phase's load, s (default 20)")
    ap.add_argument("--concurrency", type=int, default=64,
                    help="journeys in flight in the saturation phase (default 64; 0 skips it "
                         "and the submit-only baseline)")
    ap.add_argument("--connections", type=int, default=24,
                    help="HTTP requests in flight at most (default 24; the case service sheds "
                         "above max_in_flight 32)")
    ap.add_argument("--drain-s", type=float, default=30.0,
                    help="after a phase, s to wait for its journeys to end (default 30)")
    ap.add_argument("--profile", default="",
                    help="py-spy the named service (case, decision, audit, notification, saga), "
                         "'all' of them, or 'auto' (the busiest of the phase before) during "
                         "saturation")
    ap.add_argument("--log-statements", action="store_true",
                    help="log every statement of the bench's databases (log_min_duration_statement"
                         " = 0 on them; costs PostgreSQL CPU: a counting run, not a timing run) "
                         "and print statements per journey by service and text")
    ap.add_argument("--log-dir", default=".local/bench-journeys-logs",
                    help="service logs (default .local/bench-journeys-logs)")
    ap.add_argument("--fast", action="store_true",
                    help="synchronous_commit=off everywhere (NOT production durability)")
    args = ap.parse_args(argv)
    try:
        args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--rates: comma-separated numbers expected, got {args.rates!r}")
    if any(r <= 0 for r in args.rates):
        ap.error("--rates: every rate must be > 0 journeys/s")
    if args.seconds <= 0 or args.drain_s < 0 or args.connections < 1 or args.concurrency < 0:
        ap.error("--seconds > 0, --drain-s >= 0, --connections >= 1 and --concurrency >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    label = durability(args.fast)
    pg_url = os.environ.get("CASESTREAM_PG_URL", "postgresql://postgres@127.0.0.1:15432")
    bootstrap = os.environ.get("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    registry = os.environ.get("CASESTREAM_REGISTRY_URL", "http://127.0.0.1:18081/apis/ccompat/v7")
    from casestream.service import StackError
    from services.demo import SUITE
    from tests.support.suite import running_stack, service_databases, suite_env

    check_durability(f"{pg_url}/postgres", args.fast)
    print(f"journeys: {label}; load average {load_average()}; starting the suite ...", flush=True)
    with ExitStack() as stack:
        databases = stack.enter_context(service_databases(pg_url, SUITE, "bench"))
        if args.log_statements:
            import psycopg

            with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
                for db in databases.values():
                    conn.execute(f'ALTER DATABASE "{db}" SET log_min_duration_statement = 0')
        env = suite_env(bootstrap, pg_url, registry, databases, rate_limit=1_000_000)
        try:
            services = stack.enter_context(running_stack(env, SUITE, Path(args.log_dir)))
        except StackError as e:
            print(f"journeys: {e} (logs in {args.log_dir})", file=sys.stderr)
            return 1
        base = f"http://127.0.0.1:{env['CASESTREAM_CASE_PORT']}"
        dsns = {name: f"{pg_url}/{db}" for name, db in databases.items()}
        roots = {name: services.procs[name].popen.pid for name in SUITE}
        roots.update(infra_pids(REPO / ".local"))
        roots["bench"] = os.getpid()
        results = asyncio.run(run_phases(args, base, dsns, roots))
    print(f"\njourneys: {label}; load average at the end {load_average()}")
    json_record("journeys", durability=label.split(" ")[0], phases=[
        {"phase": p.name, "dropped": p.dropped, "errors": sum(p.errors.values()),
         "started": r["started"], "ended": r["ended"], "per_s": round(r["per_s"], 1),
         "journey_ms": json_safe(r["journey_ms"]), "submit_http_ms": json_safe(r["submit_http_ms"]),
         "cpu_s": {k: round(v, 1) for k, v in p.cpu_s.items()}, "bottleneck": busiest(p.cpu_s),
         "cpu_ms_per_journey": {k: round(v, 1) for k, v in r.get("cpu_ms_per_journey", {}).items()},
         "budget": {k: {c: round(v, 2) for c, v in row.items()} for k, row in r.get("budget", {}).items()},
         "load": p.load} for p, r in results])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
