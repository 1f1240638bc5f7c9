"""Fault soak of the suite: a steady stream of cases while faults are injected, then invariants.

``python -m services.soak --minutes 20`` (what ``make soak SOAK_MINUTES=20`` runs) starts the
five services as processes — two instances each of case and audit, or ``--replicas N`` of
every service (``make soak REPLICAS=N``): separate processes on the ports
:func:`casestream.service.replica_env` gives instance ``i`` (the service's port + 100 (i-1)),
sharing their service's database, consumer groups and outbox shards — and one standalone
outbox relay on the saga database beside the saga instances' own, opens and submits cases at
``--rate`` cases/s through the case instances in turn (with Idempotency-Keys, retried while
an instance is down), and meanwhile, at random times (``--seed``), injects faults one at a
time:

==================  ===============================================================
``kill``            SIGKILL one service instance (its consumers and relay die with it),
                    start it again after 1-5 s
``kill-relay``      SIGKILL the standalone saga relay, start it again after 1-3 s
``restart-kafka``   ``deploy/infra.sh down kafka`` then ``up kafka`` (the broker restarts)
``restart-pg``      ``deploy/infra.sh down postgres`` (``pg_ctl -m fast``) then ``up postgres``
``rebalance``       a transient member joins one of the suite's consumer groups (no commits)
                    and leaves once it has its assignment: two rebalances of that group
``poison``          a value that is not Avro on an outbox topic (header ``id`` = ``poison-…``)
==================  ===============================================================

The first faults go once through every kind (shuffled; the load phase lasts until they are
done, however short ``--minutes``), later ones are drawn at random. Only
the infrastructure that ``deploy/infra.sh`` of this checkout runs (with the caller's
``CASESTREAM_*_PORT`` variables) is restarted. When the load phase ends, every instance is
started again if down, the cases are given ``--drain-s`` seconds to finish, and the checker
proves:

1. every case reached a final state (``closed`` or ``returned``), its trail complete;
2. one notice (SMTP message) per case with a violation determined, none for the others;
3. one audit journal entry per event: every event id published on the outbox topics since the
   start is in ``audit_journal`` (its primary key keeps it at one);
4. no saga started twice: one case-review saga per case (an appeal or a correction is a
   saga of its own definition);
5. no partition left without progress: every suite consumer group has committed every
   partition it is assigned up to the log end;
6. the only dead letters (``<consumer>.dlq`` since the start) are the injected poison messages;
7. inbox sizes bounded: each consumer's inbox grew by at most the records it could be
   delivered during the run (its lag at the start plus what was appended to its topics and
   its ``.redrive`` topic since): one row per event, however many deliveries, retries and
   rebalances (the topics keep 30-90 days and the dedup window is 7 days, so no row of the
   run may be purged yet);
8. work shared between instances: every consumer and relay of a service with several
   instances applied events (while assigned partitions) or published rows (while holding
   shard leases) in at least two of them, and the saga outbox shards were leased by at least
   two relays (a :class:`casestream.testing.WorkSampler` reads every instance's
   ``/metrics`` and the ``outbox_relay_lease`` tables every second).

It prints each fault as it happens, the faults injected per kind, each invariant with its
figures, the inbox size (rows, bytes) of every service database at the end and at the
start, what each outbox still holds (pending rows: the oldest one's age, most attempts, a last
error; failed rows; shard leases held), what each instance did (events applied and partitions per consumer, rows published
and shards per relay, its processes) and Kafka's view of each group at the end (members and
their partitions); exits 0 only when every invariant holds. Run it, as the e2e tests, alone on the machine: it uses the services' fixed
HTTP ports and restarts the shared infrastructure (``flock /tmp/casestream-e2e.lock``).
"""

from __future__ import annotations

import argparse
import email
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from casestream.service import CommonSettings, ServiceStack, StackError, replica_env, service_port
from casestream import testing
from services.demo import FINAL_CASE_STATES, SUITE, CaseRun, CaseSpec, check_trail, headers

FAULT_KINDS = ("kill", "kill-relay", "restart-kafka", "restart-pg", "rebalance", "poison")
_WEIGHTS = {"kill": 5, "kill-relay": 1, "restart-kafka": 1, "restart-pg": 1, "rebalance": 3,
            "poison": 1}
OUTBOX_TOPICS = ("outbox.event.case", "outbox.event.saga", "outbox.event.decision",
                 "outbox.event.notice")
#: The suite's consumer groups and the topics each subscribes to (``<group>.redrive`` too).
GROUPS: dict[str, tuple[str, ...]] = {
    "audit.journal": OUTBOX_TOPICS,
    "case.dashboard": ("outbox.event.case",),
    "case.saga-requests": ("outbox.event.saga",),
    "saga.orchestrator": ("outbox.event.case", "outbox.event.decision", "outbox.event.notice"),
    "decision.requests": ("outbox.event.saga",),
    "decision.statistics": ("outbox.event.decision",),
    "notification.requests": ("outbox.event.saga", "outbox.event.case"),
}
#: Instances per service without ``--replicas``: two case and two audit instances.
DEFAULT_REPLICAS = {"case": 2, "audit": 2}
#: The standalone outbox relay on the saga database (sharing its shards with the saga
#: instances' own relays by lease).
RELAY_NAME = "saga.relay-soak"
_KINDS = (
    CaseSpec(title="[fail-decision]", severity=4, evidence_count=2, expected="decision_failed"),
    CaseSpec(title="unlicensed trading", severity=4, evidence_count=2, expected="violation"),
    CaseSpec(title="late filing", severity=1, evidence_count=0, expected="no_violation"),
    CaseSpec(title="misleading advert", severity=3, evidence_count=1, expected="violation"),
    CaseSpec(title="missing register", severity=2, evidence_count=0, expected="no_violation"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What a soak run does. Durations in seconds unless named minutes.

    Attributes:
        minutes: length of the whole run (start, load with faults, drain, checks) in minutes.
        rate: cases opened and submitted per second.
        seed: seed of the fault schedule (printed; None: random).
        fault_gap_s: (min, max) pause between two faults.
        drain_s: time kept at the end for the cases to finish (part of ``minutes``; never
            less, also when the first round of faults outlasts the load phase and the run
            its ``minutes``).
        poison_max: poison messages injected at most.
        replicas: service -> instances of it (absent: 1); :func:`every_service` gives N of each.
        ready_timeout_s: how long a started instance may take to answer ``/readyz`` 200.
        log_dir: where the services' logs go.
        infra_script: ``deploy/infra.sh`` of this checkout.
    """

    minutes: float = 20.0
    rate: float = 1.0
    seed: int | None = None
    fault_gap_s: tuple[float, float] = (3.0, 10.0)
    drain_s: float = 45.0
    poison_max: int = 4
    replicas: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_REPLICAS))
    ready_timeout_s: float = 240.0
    log_dir: Path = Path(".local/soak-logs")
    infra_script: Path = Path(__file__).resolve().parents[1] / "deploy" / "infra.sh"

    def replicas_of(self, service: str) -> int:
        return max(1, int(self.replicas.get(service, 1)))


def every_service(n: int) -> dict[str, int]:
    """``Options.replicas`` for ``n`` instances of every suite service."""
    return {name: n for name in SUITE}


@dataclass(slots=True)
class Fault:
    """One injected fault: when (s since the start), what, on which target, how it went."""

    at_s: float
    kind: str
    target: str
    took_s: float = 0.0
    detail: str = ""


@dataclass(slots=True)
class Check:
    """One invariant's verdict and its figures; ``times``: when (s since the start) the
    things that broke it happened, where known (the fault timeline around them is printed)."""

    name: str
    ok: bool
    detail: str
    times: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Report:
    """The outcome of a run."""

    seed: int
    cases: int = 0
    faults: list[Fault] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    inbox: dict[str, tuple[int, int]] = field(default_factory=dict)
    inbox_at_start: dict[str, tuple[int, int]] = field(default_factory=dict)
    outbox: dict[str, str] = field(default_factory=dict)
    work: dict[str, testing.InstanceWork] = field(default_factory=dict)
    members: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    elapsed_s: float = 0.0

    kinds = FAULT_KINDS
    prefix = "soak"

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def lines(self) -> list[str]:
        by_kind = Counter(f.kind for f in self.faults)
        out = [f"{self.prefix}: {self.cases} cases, {len(self.faults)} faults in"
               f" {self.elapsed_s:.0f} s (seed {self.seed}): "
               + ", ".join(f"{k} x{by_kind[k]}" for k in self.kinds)]
        out += [f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}" for c in self.checks]
        for db, (rows, size) in sorted(self.inbox.items()):
            rows0, size0 = self.inbox_at_start.get(db, (0, 0))
            out.append(f"inbox  {db}: {rows} rows, {size / 1024:.0f} kB"
                       f" (at the start {rows0} rows, {size0 / 1024:.0f} kB)")
        out += [f"outbox {db}: {state}" for db, state in sorted(self.outbox.items())]
        out += self.work_lines()
        out.append(f"{self.prefix}: {'all invariants hold' if self.ok else 'INVARIANTS VIOLATED'}")
        return out

    def work_lines(self) -> list[str]:
        """Per instance: events applied and most partitions held per consumer, rows
        published and most outbox shard leases held per relay; then Kafka's view of each
        group at the end (members and their partition counts)."""
        out = []
        for instance, w in sorted(self.work.items()):
            consumers = ", ".join(f"{c} {n} applied/{w.partitions_max.get(c, 0)} partitions"
                                  for c, n in sorted(w.applied.items()))
            relays = ", ".join(f"{r} {n} published/{w.shards_max.get(r, 0)} shards"
                               for r, n in sorted(w.published.items()))
            leases = ", ".join(f"{n} leases" for _db, n in sorted(w.leases_max.items()))
            parts = [p for p in (consumers, relays or leases) if p]
            out.append(f"work   {instance} ({len(w.incarnations)} processes): "
                       + ("; ".join(parts) or "nothing sampled"))
        for group, members in sorted(self.members.items()):
            out.append(f"group  {group}: {len(members)} members, partitions "
                       + "/".join(str(len(tps)) for _client, tps in members))
        return out


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- the processes


class Suite:
    """The service instances (``Options.replicas`` of each service: instance ``i`` in stack
    ``i``, on the ports :func:`casestream.service.replica_env` gives it) and the standalone
    saga relay."""

    services: tuple[str, ...] = SUITE

    def __init__(self, env: Mapping[str, str], opts: Options) -> None:
        # a killed instance's partitions move on after 6 s, not librdkafka's 45 s; a member
        # whose group join does not complete after a broker restart gets a new Kafka client
        # after 45 s (a revoke may wait for a batch of up to max_batch_s, 30 s, and its
        # commit), not 306 s (max.poll.interval.ms + session.timeout.ms)
        self.env = {"CASESTREAM_KAFKA_SESSION_TIMEOUT_MS": "6000",
                    "CASESTREAM_CONSUMER_REJOIN_TIMEOUT_S": "45", **env}
        counts = {n: opts.replicas_of(n) for n in self.services}
        self.stacks = [ServiceStack(env=replica_env(self.services, i, self.env),
                                    log_dir=opts.log_dir / f"instance-{i}",
                                    ready_timeout_s=opts.ready_timeout_s)
                       for i in range(1, max(counts.values()) + 1)]
        self.instances: dict[str, tuple[ServiceStack, str]] = {
            f"{n}#{i}": (self.stacks[i - 1], n) for n in self.services for i in range(1, counts[n] + 1)}
        self.log_dir = opts.log_dir
        self.relay: subprocess.Popen[bytes] | None = None
        self.case_urls = [self.url(f"case#{i}") for i in range(1, counts["case"] + 1)]

    def url(self, instance: str) -> str:
        stack, name = self.instances[instance]
        return f"http://127.0.0.1:{service_port(name, stack.env)}"

    def start(self) -> None:
        """Register the schemas once, then start the instances one stack (instance number)
        at a time, each stack ready before the next starts: ten Python processes importing
        at once on a small machine take longer than a readiness timeout."""
        self.stacks[0].register_schemas()
        for stack in self.stacks:
            names = [name for st, name in self.instances.values() if st is stack]
            for name in names:
                stack.start(name)
            stack.wait_ready(names)
        self.start_relay()

    def start_relay(self) -> None:
        dsn = _dsn(self.env, "saga")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_dir / "saga-relay.log", "ab")  # noqa: SIM115 - child owns it
        self.relay = subprocess.Popen(
            [sys.executable, "-m", "casestream.outbox.relay", "--dsn", dsn, "--bootstrap",
             self.env["CASESTREAM_KAFKA_BOOTSTRAP"], "--name", RELAY_NAME],
            env=self.env, stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def kill_relay(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.kill()
            self.relay.wait(10)

    def kill(self, instance: str) -> None:
        stack, name = self.instances[instance]
        stack.kill(name)

    def revive(self, instance: str, attempts: int = 5) -> None:
        """Start ``instance`` again, retrying while the infrastructure is still coming back."""
        stack, name = self.instances[instance]
        for attempt in range(1, attempts + 1):
            try:
                stack.start(name)
                stack.wait_ready([name])
                return
            except StackError as e:
                if attempt == attempts:
                    raise
                say(f"soak:          {instance} did not start ({str(e)[:160]}); again")
                time.sleep(3)

    def targets(self) -> dict[str, testing.Target]:
        """The running processes by instance name (the standalone relay without HTTP)."""
        out = {}
        for instance, (stack, name) in self.instances.items():
            proc = stack.procs.get(name)
            if proc is not None and proc.popen.poll() is None:
                out[instance] = testing.Target(proc.popen.pid, self.url(instance))
        if self.relay is not None and self.relay.poll() is None:
            out[RELAY_NAME] = testing.Target(self.relay.pid)
        return out

    def not_ready(self) -> dict[str, str]:
        """``/readyz`` of every instance that does not answer 200: instance -> its answer
        (a stalled consumer names the step it is stuck in)."""
        out: dict[str, str] = {}
        for instance in self.instances:
            try:
                r = httpx.get(f"{self.url(instance)}/readyz", timeout=10.0)
                if r.status_code != 200:
                    out[instance] = r.text[:400]
            except httpx.HTTPError as e:
                out[instance] = f"{type(e).__name__}: {e}"[:200]
        return out

    def revive_all(self) -> None:
        for instance, (stack, name) in self.instances.items():
            proc = stack.procs.get(name)
            if proc is None or proc.popen.poll() is not None:
                self.revive(instance)
        if self.relay is None or self.relay.poll() is not None:
            self.start_relay()

    def stop(self) -> None:
        for stack in reversed(self.stacks):
            stack.stop_all()
        if self.relay is not None and self.relay.poll() is None:
            self.relay.send_signal(signal.SIGTERM)
            try:
                self.relay.wait(30)
            except subprocess.TimeoutExpired:
                self.relay.kill()


# ---------------------------------------------------------------- load


@dataclass(slots=True)
class Command:
    """One command sent (an entry of the ledger): when (s since the driver started), its
    path and Idempotency-Key, every attempt's answer (status code or exception name) and the
    accepted answer's id (None: never accepted)."""

    at_s: float
    path: str
    key: str
    answers: list[str] = field(default_factory=list)
    accepted: str | None = None


class Driver:
    """Opens and submits cases at ``rate`` per second through the case instances; every
    command and its answers go to ``commands`` (the ledger)."""

    def __init__(self, suite: Suite, rate: float) -> None:
        self.suite, self.rate = suite, rate
        self.runs: list[CaseRun] = []
        self.failed: list[str] = []
        self.commands: list[Command] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        i = 0
        with httpx.Client(timeout=10.0) as client:
            next_at = time.monotonic()
            while not self.stop.is_set():
                kind = _KINDS[i % len(_KINDS)]
                spec = CaseSpec(title=f"Soak {i:05d} {kind.title}", severity=kind.severity,
                                evidence_count=kind.evidence_count, expected=kind.expected)
                run = self._drive(client, spec, i)
                if run is not None:
                    self.runs.append(run)
                i += 1
                next_at += 1.0 / self.rate
                self.stop.wait(max(0.0, next_at - time.monotonic()))

    def _drive(self, client: httpx.Client, spec: CaseSpec, i: int) -> CaseRun | None:
        open_key, submit_key = str(uuid.uuid4()), str(uuid.uuid4())
        case_id = self._call(client, i, "/cases", spec.body(), open_key, spec.tenant)
        if case_id is None:
            self.failed.append(f"{spec.title}: not opened")
            return None
        if self._call(client, i, f"/cases/{case_id}/submit", {}, submit_key, spec.tenant) is None:
            self.failed.append(f"{spec.title} {case_id}: not submitted")
        return CaseRun(spec, case_id)

    def _call(self, client: httpx.Client, i: int, path: str, body: dict[str, Any], key: str,
              tenant: str, timeout_s: float = 90.0) -> str | None:
        """POST with an Idempotency-Key to one case instance, then the other, until it answers."""
        deadline = time.monotonic() + timeout_s
        urls = self.suite.case_urls
        n = i
        command = Command(time.monotonic() - self.t0, path, key)
        self.commands.append(command)
        while time.monotonic() < deadline:
            url = urls[n % len(urls)] + path
            n += 1
            try:
                r = client.post(url, json=body, headers=headers(tenant, **{"Idempotency-Key": key}))
                command.answers.append(str(r.status_code))
                if r.status_code < 300:
                    command.accepted = str(r.json().get("id", "ok"))
                    return command.accepted
                if r.status_code < 500 and r.status_code not in (409, 429):
                    say(f"soak:          {path}: {r.status_code} {r.text[:200]}")
                    return None
            except httpx.HTTPError as e:
                command.answers.append(type(e).__name__)
            time.sleep(0.3)
        return None


# ---------------------------------------------------------------- faults


class Injector:
    """Injects one fault at a time at random moments until ``stop`` is set."""

    groups: Mapping[str, tuple[str, ...]] = GROUPS
    topics: tuple[str, ...] = OUTBOX_TOPICS
    kinds: tuple[str, ...] = FAULT_KINDS
    weights: Mapping[str, float] = _WEIGHTS
    prefix = "soak"

    def __init__(self, suite: Suite, opts: Options, rng: random.Random, t0: float) -> None:
        self.suite, self.opts, self.rng, self.t0 = suite, opts, rng, t0
        self.bootstrap = suite.env["CASESTREAM_KAFKA_BOOTSTRAP"]  # poison and rebalances
        self.faults: list[Fault] = []
        self.poison_ids: dict[str, str] = {}  # id -> topic
        self.stop = threading.Event()
        self.first_round = threading.Event()  # set once every kind was injected
        self.errors: list[str] = []

    def run(self) -> None:
        queue = list(self.kinds)
        self.rng.shuffle(queue)
        while not self.stop.wait(self.rng.uniform(*self.opts.fault_gap_s)):
            self.inject(queue.pop(0) if queue else self._draw())
            if not queue and len(self.faults) >= len(self.kinds):
                self.first_round.set()

    def inject(self, kind: str) -> Fault:
        """Inject one fault of ``kind`` (method ``_<kind>``), wait for its end, record and
        print it; an error is recorded, not raised."""
        fault = Fault(at_s=time.monotonic() - self.t0, kind=kind, target="")
        started = time.monotonic()
        try:
            getattr(self, "_" + kind.replace("-", "_"))(fault)
        except Exception as e:  # noqa: BLE001 - reported, the soak goes on
            fault.detail += f" ERROR {type(e).__name__}: {str(e)[:200]}"
            self.errors.append(f"{kind}: {e}")
        fault.took_s = time.monotonic() - started
        self.faults.append(fault)
        say(f"{self.prefix}: +{fault.at_s:6.1f} s  {fault.kind:<16} {fault.target:<22}"
            f" {fault.took_s:5.1f} s {fault.detail}")
        return fault

    def _draw(self) -> str:
        kinds = [k for k in self.kinds
                 if k != "poison" or len(self.poison_ids) < self.opts.poison_max]
        return self.rng.choices(kinds, weights=[self.weights[k] for k in kinds])[0]

    def _instance(self) -> str:
        """The instance a fault on one instance hits."""
        return self.rng.choice(sorted(self.suite.instances))

    def _kill(self, fault: Fault) -> None:
        fault.target = self._instance()
        self.suite.kill(fault.target)
        down = self.rng.uniform(1.0, 5.0)
        time.sleep(down)
        self.suite.revive(fault.target)
        fault.detail = f"SIGKILL, down {down:.1f} s"

    def _kill_relay(self, fault: Fault) -> None:
        fault.target = RELAY_NAME
        self.suite.kill_relay()
        time.sleep(self.rng.uniform(1.0, 3.0))
        self.suite.start_relay()
        fault.detail = "SIGKILL"

    def _infra(self, fault: Fault, component: str) -> None:
        fault.target = component
        testing.restart_infra(self.opts.infra_script, component, self.suite.env)

    def _restart_kafka(self, fault: Fault) -> None:
        self._infra(fault, "kafka")

    def _restart_pg(self, fault: Fault) -> None:
        self._infra(fault, "postgres")
        fault.detail = "pg_ctl stop -m fast"

    def _rebalance(self, fault: Fault) -> None:
        fault.target = self.rng.choice(sorted(self.groups))
        joined = testing.force_rebalance(self.bootstrap, fault.target, self.groups[fault.target])
        fault.detail = "joined and left" if joined else "joined, no assignment in 30 s"

    def _poison(self, fault: Fault) -> None:
        fault.target = self.rng.choice(self.topics)
        pid = testing.inject_poison(self.bootstrap, fault.target)
        self.poison_ids[pid] = fault.target
        fault.detail = pid


# ---------------------------------------------------------------- checks


class Checker:
    """Reads the databases, the topics and the SMTP sink to prove the invariants."""

    groups: Mapping[str, tuple[str, ...]] = GROUPS
    topics: tuple[str, ...] = OUTBOX_TOPICS  # what audit.journal reads
    services: tuple[str, ...] = SUITE

    def __init__(self, suite: Suite, start_offsets: dict[str, dict[int, int]],
                 maildir: Path | None) -> None:
        self.suite = suite
        self.env = suite.env
        self.start_offsets = start_offsets
        self.maildir = maildir

    def dsn(self, database: str) -> str:
        return _dsn(self.env, database)

    def query(self, database: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return testing.query(self.dsn(database), sql, params)

    # -- 1
    def wait_final(self, runs: list[CaseRun], timeout_s: float) -> float:
        """Poll until every case is final with a complete trail or ``timeout_s`` passed;
        return the seconds waited."""
        began = time.monotonic()
        deadline = began + timeout_s
        pending = list(runs)
        while pending and time.monotonic() < deadline:
            ids = [r.case_id for r in pending]
            status = dict(self.query("case", "SELECT id::text, status FROM cases"
                                             " WHERE id::text = ANY(%s)", (ids,)))
            trails = self._trails(ids)
            still = []
            for r in pending:
                r.status = status.get(r.case_id, "missing")
                r.trail = trails.get(r.case_id, ())
                if r.status not in FINAL_CASE_STATES or _trail_problems(r):
                    still.append(r)
            pending = still
            if pending:
                time.sleep(1.0)
        return time.monotonic() - began

    def _trails(self, case_ids: list[str]) -> dict[str, tuple[str, ...]]:
        rows = self.query("audit", "SELECT case_id, event_type FROM case_timeline"
                                   " WHERE case_id = ANY(%s) ORDER BY case_id, occurred_at,"
                                   " aggregate_type, aggregate_version", (case_ids,))
        out: dict[str, list[str]] = {}
        for case_id, event_type in rows:
            out.setdefault(case_id, []).append(event_type)
        return {k: tuple(v) for k, v in out.items()}

    def final_states(self, runs: list[CaseRun], not_driven: list[str]) -> Check:
        bad = [f"{r.case_id} {r.status} {'; '.join(_trail_problems(r))}" for r in runs
               if r.status not in FINAL_CASE_STATES or _trail_problems(r)]
        states = Counter(r.status for r in runs)
        detail = (f"{len(runs) - len(bad)}/{len(runs)} final with complete trails ("
                  + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")")
        if not_driven:
            detail += f"; {len(not_driven)} not accepted by the API: {not_driven[:3]}"
        if bad:
            detail += f"; not final/incomplete: {bad[:5]}"
        return Check("every case reached a final state", not bad and not not_driven, detail)

    # -- 2
    def notices(self, runs: list[CaseRun]) -> Check:
        """One notice per violating case, counted by Message-ID: the sender mails a notice again,
        with the same Message-ID, when it died between the SMTP server's ``250`` and its commit
        (``services.notification.application.sender``), and a de-duplicating reader sees one."""
        by_case: dict[str, set[str]] = {}
        resent = 0
        ids = {r.case_id for r in runs}
        if self.maildir is not None:
            for path in self.maildir.glob("*.eml"):
                message = email.message_from_bytes(path.read_bytes())
                if message.get("X-Casestream-Notice-Kind", "notice") != "notice":
                    continue  # a correction / appeal-rejection mail is not a second notice
                text = str(message)
                message_id = message.get("Message-ID") or path.name
                for case_id in ids:
                    if case_id in text:
                        seen = by_case.setdefault(case_id, set())
                        resent += message_id in seen
                        seen.add(message_id)
        counts = Counter({case_id: len(mids) for case_id, mids in by_case.items()})
        violating = [r for r in runs if "ViolationDetermined" in r.trail]
        wrong = [f"{r.case_id}: {counts[r.case_id]}" for r in runs
                 if counts[r.case_id] != (1 if "ViolationDetermined" in r.trail else 0)]
        detail = f"{len(violating)} violating cases, {sum(counts.values())} notices"
        if resent:
            detail += f" ({resent} sent again with the same Message-ID)"
        if self.maildir is None:
            return Check("one notice per violating case", False, "CASESTREAM_SMTP_MAILDIR unset")
        if wrong:
            detail += f"; wrong counts: {wrong[:5]}"
        return Check("one notice per violating case", not wrong, detail)

    # -- 3, 6
    def topics_since_start(self, topics: Sequence[str]) -> list[tuple[str, Any]]:
        """(topic, message) of every message produced on ``topics`` since the start."""
        return [(m.topic(), m) for m in testing.read_since(
            self.env["CASESTREAM_KAFKA_BOOTSTRAP"], topics, self.start_offsets)]

    def audit_entries(self, poison: Mapping[str, str]) -> Check:
        ids: set[str] = set()
        for _t, m in self.topics_since_start(self.topics):
            hid = dict(m.headers() or []).get("id")
            if hid is not None and hid.decode() not in poison:
                ids.add(hid.decode())
        journal = {r[0] for r in self.query(
            "audit", "SELECT event_id::text FROM audit_journal WHERE event_id::text = ANY(%s)",
            (sorted(ids),))}
        missing = sorted(ids - journal)
        detail = (f"{len(ids)} events published, {len(journal)} in the journal"
                  f" (event_id is its primary key: at most one each)")
        if missing:
            detail += f"; missing: {missing[:5]}"
        return Check("one audit entry per event", bool(ids) and not missing, detail)

    def dead_letters(self, poison: Mapping[str, str]) -> Check:
        dlqs = [f"{g}.dlq" for g in self.groups]
        seen: Counter[str] = Counter()
        other: list[str] = []
        for topic, m in self.topics_since_start(dlqs):
            hid = (dict(m.headers() or []).get("id") or b"").decode()
            if hid in poison:
                seen[hid] += 1
            else:
                reason = (dict(m.headers() or []).get("dlq.error.reason") or b"").decode()
                other.append(f"{topic} id={hid or '-'} reason={reason}")
        never = [p for p in poison if not seen[p]]
        detail = (f"{sum(seen.values())} dead letters of {len(poison)} injected poison"
                  f" messages, {len(other)} others")
        if other:
            detail += f": {other[:5]}"
        if never:
            detail += f"; poison never dead-lettered: {never[:3]}"
        return Check("the only dead letters are the injected poison messages",
                     not other and not never, detail)

    # -- 4
    def sagas(self, runs: list[CaseRun]) -> Check:
        ids = [r.case_id for r in runs]
        counts = dict(self.query("saga", "SELECT case_id, count(*) FROM saga"
                                         " WHERE case_id = ANY(%s) AND definition = 'case-review'"
                                         " GROUP BY case_id", (ids,)))
        twice = [f"{c}: {n}" for c, n in counts.items() if n > 1]
        none = [c for c in ids if c not in counts]
        detail = f"{len(counts)} sagas for {len(ids)} cases"
        if twice:
            detail += f"; started more than once: {twice[:5]}"
        if none:
            detail += f"; no saga: {none[:5]}"
        return Check("no saga started twice", not twice and not none, detail)

    # -- 5
    def progress(self, timeout_s: float) -> Check:
        lagging: dict[str, int] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            lagging = self._lag()
            if not lagging or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        parts = sum(1 for _ in lagging)
        detail = (f"{len(self.groups)} groups: every partition committed to its log end" if not lagging
                  else f"{parts} partitions behind: {sorted(lagging.items())[:6]}; "
                       f"not ready: {self.suite.not_ready() or 'none'}")
        return Check("no partition left without progress", not lagging, detail)

    def _lag(self) -> dict[str, int]:
        return testing.group_lag(self.env["CASESTREAM_KAFKA_BOOTSTRAP"], self.groups)

    def inbox_sizes(self) -> dict[str, tuple[int, int]]:
        return {db: testing.inbox_size(self.dsn(db)) for db in self.services}

    def outbox_states(self) -> dict[str, str]:
        """Per service database with an outbox, what its relays left: pending rows (the oldest one's age,
        the most attempts, one last error), failed rows, and the shard leases held now —
        what tells a relay that stalled from one that was never given the rows."""
        states = {}
        for db in self.services:
            try:
                if self.query(db, "SELECT to_regclass('outbox') IS NULL")[0][0]:
                    continue  # a service that publishes nothing (audit)
                pending, failed, attempts, age_s, error = self.query(db, (
                    "SELECT count(*) FILTER (WHERE status = 'pending'),"
                    " count(*) FILTER (WHERE status = 'failed'),"
                    " coalesce(max(attempts) FILTER (WHERE status = 'pending'), 0),"
                    " extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending')),"
                    " max(last_error) FILTER (WHERE status = 'pending') FROM outbox"))[0]
                owners, held, shards = self.query(db, (
                    "SELECT count(DISTINCT locked_by) FILTER (WHERE locked_until > now()),"
                    " count(*) FILTER (WHERE locked_until > now()), count(*)"
                    " FROM outbox_relay_lease"))[0]
            except Exception as e:  # noqa: BLE001 - a figure for the report, not a check
                states[db] = f"unknown ({type(e).__name__}: {e})"
                continue
            text = f"{pending} pending"
            if pending:
                text += f" (oldest {float(age_s):.0f} s, at most {attempts} attempts"
                text += f", last error {str(error)[:160]!r})" if error else ")"
            states[db] = (f"{text}, {failed} failed; leases: {held}/{shards} shards held by"
                          f" {owners} relays")
        return states

    # -- 7
    def inbox_bound(self, rows_at_start: Mapping[str, int], lag_at_start: Mapping[str, int]) -> Check:
        """Each suite consumer's inbox grew by at most the records it could be delivered in
        the run: its lag at the start plus what was appended since to its topics and its
        ``.redrive`` topic. An inbox row is one (consumer, event id), whatever the number of
        deliveries, retries or rebalances; no row of the run may be purged yet (the topics
        keep 30-90 days and the dedup window is 7 days), so growth beyond that bound is a
        row per delivery, not per event."""
        bootstrap = self.env["CASESTREAM_KAFKA_BOOTSTRAP"]
        topics = sorted({t for g, ts in self.groups.items() for t in (*ts, f"{g}.redrive")})
        end = testing.end_offsets(bootstrap, topics)
        appended = {t: sum(hi - self.start_offsets.get(t, {}).get(p, 0) for p, hi in parts.items())
                    for t, parts in end.items()}
        over, figures = [], []
        for group, group_topics in self.groups.items():
            db = group.split(".")[0]
            rows = dict(self.query(db, "SELECT consumer, count(*) FROM consumer_inbox"
                                       " WHERE consumer = %s GROUP BY consumer", (group,)))
            grown = int(rows.get(group, 0)) - int(rows_at_start.get(group, 0))
            bound = int(lag_at_start.get(group, 0)) + sum(
                appended.get(t, 0) for t in (*group_topics, f"{group}.redrive"))
            figures.append(f"{group} +{grown} <= {bound}")
            if grown > bound:
                over.append(f"{group}: +{grown} rows > {bound} records")
        detail = "inbox rows added <= records deliverable: " + ", ".join(figures)
        if over:
            detail += f"; OVER: {over}"
        return Check("inbox sizes bounded", not over, detail)

    def inbox_rows(self) -> dict[str, int]:
        """Inbox rows per suite consumer (consumer -> rows)."""
        out: dict[str, int] = {}
        for db in sorted({g.split(".")[0] for g in self.groups}):
            for consumer, n in self.query(db, "SELECT consumer, count(*) FROM consumer_inbox"
                                              " GROUP BY consumer"):
                out[str(consumer)] = int(n)
        return out


def work_shared(work: Mapping[str, testing.InstanceWork], opts: Options) -> Check:
    """Every consumer and relay of a service with several instances worked in at least two
    of them (``testing.unshared``), and the saga database's shard leases were spread over
    at least two relay owners."""
    problems = testing.unshared({i: w for i, w in work.items() if i != RELAY_NAME},
                                lambda instance: instance.split("#")[0])
    lease_holders = [i for i, w in work.items() if w.leases_max.get("saga", 0) > 0]
    if len(lease_holders) < 2:
        problems.append(f"saga outbox shards leased by {len(lease_holders)} relays: {lease_holders}")
    multi = [n for n in SUITE if opts.replicas_of(n) > 1]
    detail = (f"services with several instances ({', '.join(multi) or 'none'}): every consumer"
              f" and relay worked in >= 2; saga shard leases held by {len(lease_holders)} relays")
    if problems:
        detail = "; ".join(problems)
    return Check("work shared between instances", not problems, detail)


def _trail_problems(run: CaseRun) -> list[str]:
    """Problems of a finished case's trail for the outcome it reached (faults may turn a
    decision into a compensation, so the outcome, not the plan, says which trail is due)."""
    if run.status == "returned":
        expected = "decision_failed"
    elif "ViolationDetermined" in run.trail:
        expected = "violation"
    else:
        expected = "no_violation"
    return check_trail(CaseRun(CaseSpec(title="", severity=0, evidence_count=0,
                                        expected=expected), run.case_id, run.status, run.trail))


def _dsn(env: Mapping[str, str], database: str) -> str:
    pg_url = env.get("CASESTREAM_PG_URL") or CommonSettings.model_fields["pg_url"].default
    return CommonSettings(pg_url=pg_url).database_url(database)


# ---------------------------------------------------------------- the run


def run(opts: Options, env: Mapping[str, str] | None = None,
        out: Callable[[str], None] = say) -> Report:
    """One soak run (see the module docstring); returns its report (also printed)."""
    env = dict(os.environ if env is None else env)
    if not opts.infra_script.is_file():
        raise StackError(f"{opts.infra_script} not found: the soak restarts the local"
                         " infrastructure with deploy/infra.sh of a checkout")
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    report = Report(seed=seed)
    t0 = time.monotonic()
    budget_s = opts.minutes * 60.0
    bootstrap = env["CASESTREAM_KAFKA_BOOTSTRAP"]
    start = testing.end_offsets(bootstrap, [*OUTBOX_TOPICS, *(f"{g}.dlq" for g in GROUPS),
                                            *(f"{g}.redrive" for g in GROUPS)])
    lag_at_start: dict[str, int] = {}
    for where, n in testing.group_lag(bootstrap, GROUPS).items():
        lag_at_start[where.split(" ")[0]] = lag_at_start.get(where.split(" ")[0], 0) + n
    suite = Suite(env, opts)
    try:
        report.inbox_at_start = Checker(suite, start, None).inbox_sizes()
        rows_at_start = Checker(suite, start, None).inbox_rows()
    except Exception:  # noqa: BLE001 - first run on this database: no inbox table yet
        report.inbox_at_start, rows_at_start = {}, {}
    sampler = testing.WorkSampler(suite.targets, {db: _dsn(suite.env, db) for db in SUITE})
    maildir = Path(env["CASESTREAM_SMTP_MAILDIR"]) if env.get("CASESTREAM_SMTP_MAILDIR") else None
    try:
        out(f"soak: starting {len(suite.instances)} service instances ("
            + ", ".join(f"{n} x{opts.replicas_of(n)}" for n in SUITE)
            + f") and a saga relay (logs in {opts.log_dir}), {opts.minutes:g} min, seed {seed}")
        suite.start()
        sampler.start()
        load_s = max(20.0, budget_s - (time.monotonic() - t0) - opts.drain_s)
        out(f"soak: load {opts.rate:g} cases/s with faults for {load_s:.0f} s")
        driver = Driver(suite, opts.rate)
        injector = Injector(suite, opts, rng, t0)
        load_with_faults(driver, injector, load_s, out)
        report.faults = injector.faults
        report.cases = len(driver.runs)
        checker = Checker(suite, start, maildir)
        left = max(opts.drain_s, budget_s - (time.monotonic() - t0) - 15.0)
        out(f"soak: load stopped; {len(driver.runs)} cases, waiting up to {left:.0f} s for them")
        waited = checker.wait_final(driver.runs, left)
        out(f"soak: waited {waited:.0f} s for the cases to finish")
        sampler.stop()
        report.work = sampler.work()
        report.members = testing.group_members(bootstrap, list(GROUPS))
        report.checks = [
            checker.final_states(driver.runs, driver.failed),
            checker.notices(driver.runs),
            checker.audit_entries(injector.poison_ids),
            checker.sagas(driver.runs),
            checker.progress(30.0),
            checker.dead_letters(injector.poison_ids),
            checker.inbox_bound(rows_at_start, lag_at_start),
            work_shared(report.work, opts),
        ]
        if injector.errors:
            report.checks.append(Check("every fault injected", False, "; ".join(injector.errors)))
        report.inbox = checker.inbox_sizes()
        report.outbox = checker.outbox_states()
    finally:
        sampler.stop()
        suite.stop()
        # a restart that failed half-way must not leave the infrastructure down (idempotent)
        subprocess.run([str(opts.infra_script), "up"], env=suite.env, capture_output=True,
                       timeout=600, check=False)
        report.elapsed_s = time.monotonic() - t0
    for line in report.lines():
        out(line)
    return report


def load_with_faults(driver: Driver, injector: Injector, load_s: float,
                     out: Callable[[str], None], first_round_s: float = 600.0) -> None:
    """Drive cases and inject faults for ``load_s`` seconds, and on until every fault kind
    was injected once (at most ``first_round_s`` more); then let the fault in progress end
    (an instance is started again), stop the load and start every instance that is down."""
    threads = [threading.Thread(target=driver.run, daemon=True),
               threading.Thread(target=injector.run, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(load_s)
    if not injector.first_round.wait(first_round_s):
        out(f"{injector.prefix}: not every kind of fault was injected within"
            f" {first_round_s / 60:g} min more")
    injector.stop.set()
    threads[1].join(600)
    driver.stop.set()
    threads[0].join(120)
    driver.suite.revive_all()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.soak",
        description="Run the five services (two case and two audit instances, or --replicas N"
                    " of each) under a steady"
                    " stream of cases while injecting faults (SIGKILL of instances and a relay,"
                    " Kafka and PostgreSQL restarts, consumer rebalances, poison messages);"
                    " then check the invariants. Exit 0 only if every invariant holds.")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="length of the whole run in minutes (default 20)")
    parser.add_argument("--rate", type=float, default=1.0, help="cases per second (default 1)")
    parser.add_argument("--seed", type=int, help="seed of the fault schedule (default random)")
    parser.add_argument("--replicas", type=int, default=None, metavar="N",
                        help="run N instances of every service (separate processes, same"
                             " databases and consumer groups; instance i on port + 100*(i-1));"
                             " default: two case and two audit instances, one of the others")
    parser.add_argument("--log-dir", default=".local/soak-logs",
                        help="where service logs go (default .local/soak-logs)")
    args = parser.parse_args(argv)
    if args.minutes < 1 or args.rate <= 0:
        parser.error("--minutes must be >= 1 and --rate > 0")
    if args.replicas is not None and not 1 <= args.replicas <= 5:
        parser.error("--replicas must be 1..5")
    replicas = DEFAULT_REPLICAS if args.replicas is None else every_service(args.replicas)
    try:
        report = run(Options(minutes=args.minutes, rate=args.rate, seed=args.seed,
                             replicas=replicas, log_dir=Path(args.log_dir)))
    except StackError as e:
        print(f"soak: {e}", file=sys.stderr)
        return 1
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
