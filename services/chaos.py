"""Chaos rig of the suite: the soak's load and invariants, with the services reaching PostgreSQL,
Kafka and the registry through Toxiproxy, zombies, database pressure, and a ledger.

``python -m services.chaos --minutes 10`` (what ``make chaos CHAOS_MINUTES=10`` runs) builds on
:mod:`services.soak` (its processes, load driver, fault loop and checker): the five services
(``--replicas N`` instances of each, default 2) and ``examples/watch`` run as processes, one
standalone saga relay beside them, while a steady stream of cases (``--rate``) is opened and
submitted, every command recorded with its answers (the ledger, ``soak.Command``).

Network. A private ``toxiproxy-server`` (``deploy/toxiproxy/tools.sh``, API on
:data:`TOXIPROXY_PORT`) runs three proxies; the services are given only the proxies'
addresses: ``pg`` (-> the shared PostgreSQL), ``registry`` (-> the shared registry) and
``kafka`` (-> a private single-node broker, :class:`casestream.testing.PrivateKafka`, whose
PLAINTEXT listener *advertises the proxy*: Kafka clients connect to the addresses the
metadata names, so a proxy in front of the bootstrap address alone would carry nothing after
the first request). The broker has a second listener, ``DIRECT``, for the rig's own reads and
writes (poison, rebalances, the checks). Kafka and PostgreSQL restarts hit the private broker
and the proxies only: the shared infrastructure other tests use is never restarted.
``--pgbouncer`` puts PgBouncer in transaction pooling mode behind the ``pg`` proxy (the rig's
own reads and database faults go to PostgreSQL directly).

Faults, drawn at random (``--seed``), one to three at a time (the first round goes once
through every kind, two at a time), each on a target no other running fault holds:

====================  ==========================================================================
``kill``              SIGKILL one instance, start it again after 1-5 s (soak)
``sigterm``           SIGTERM one instance (graceful stop: in-flight work finished, leases
                      released), start it again after 1-3 s
``kill-relay``        SIGKILL the standalone saga relay, start it again (soak)
``pause``             SIGSTOP one instance for 12-25 s, then SIGCONT: longer than its consumers'
                      session timeout (6 s) and its relay's shard lease (10 s), so its partitions
                      and shards move on while it sleeps; the resumed zombie's claims, marks,
                      offset commits and lease renewals must be refused (fencing)
``pause-relay``       the same for the standalone saga relay
``kill-kafka``        SIGKILL the private broker, start it again after 2-5 s
``pause-kafka``       SIGSTOP the private broker for 5-15 s (clients see a silent peer)
``cut-pg``            the ``pg`` proxy disabled for 2-8 s: every connection closed, new ones
                      refused (PostgreSQL down as the services see it)
``latency``           ``latency`` toxic (200-1500 ms, jitter half of it) on both directions of
                      one proxy for 5-15 s
``bandwidth``         ``bandwidth`` toxic (16-64 KB/s) server -> client on one proxy for 5-15 s
``reset``             ``reset_peer`` toxic (timeout 0) on one proxy for 1-3 s: every connection
                      that sends a byte gets a TCP RST
``half-open``         ``timeout`` toxic (timeout 0) server -> client on one proxy for 5-20 s: the
                      connections stay open and nothing comes back (a silent peer: a client
                      without a deadline of its own waits; what the server sent is dropped, and
                      removing the toxic closes those connections)
``ambiguous-commit``  ``limit_data`` toxic (bytes 0) server -> client on the ``pg`` proxy for
                      0.3-1.5 s: every statement that reaches PostgreSQL in that window is
                      executed, but its answer is dropped and the connection closed. A
                      transaction whose ``COMMIT`` is in flight is committed while its client
                      sees a connection error (the ambiguous commit); one in flight before its
                      ``COMMIT`` is rolled back by the server.
``hold-xmin``         a ``REPEATABLE READ`` transaction on one service database held open 15-40 s
                      (vacuum cannot remove the rows deleted meanwhile)
``hot-lock``          ``SELECT ... FOR UPDATE`` on the 5 newest cases held 3-10 s (the case
                      service's commands and consumers wait on those aggregates' rows)
``rebalance``         a transient member joins one of the consumer groups and leaves (soak)
``poison``            a value that is not Avro on an outbox topic (soak)
====================  ==========================================================================

The checks: the soak's (every case final with its trail, one notice per violation by
Message-ID, one audit entry per event, one saga per case, no partition behind, only the
poison dead-lettered, inbox growth bounded), and the ledger's:

- one case per open command (a retry after a lost answer or an ambiguous commit finds its
  Idempotency-Key), and no case that no answer named;
- every accepted command's event is on its topic (``CaseOpened`` for an accepted open,
  ``CaseSubmitted`` for an accepted submit, keyed by the case id);
- per key, each event's first record follows those of its lower aggregate versions (the
  versions read from the outbox tables);
- every event id is on the outbox topics exactly once; a second record is named as
  re-published in order or after a later version of its key (the relay publishes at least
  once: a row whose bookkeeping transaction failed or was ambiguous is produced again);
- every event a consumer handles (an event type it has inbox rows of) is in its inbox
  (``(consumer, event_id)`` is the inbox's primary key: applied at most once each);
- no outbox row left pending or failed.

Beside each violated check the fault timeline around what broke it is printed (the whole
timeline when no time is known). Exit 0 only when every check holds. Uses the suite's fixed
HTTP ports: run it alone (``flock /tmp/casestream-e2e.lock``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from casestream import testing
from casestream.errors import CasestreamError
from casestream.testing import Toxiproxy, ToxiproxyServer, upstream, via
from services import soak
from services.demo import SUITE
from services.soak import Check, Fault, Options

#: Ports of the rig (below 32768, clear of deploy/infra.sh's and the suite's 18101-18505).
TOXIPROXY_PORT = 17474
PROXY_PORTS = {"pg": 17432, "registry": 17081, "kafka": 17092}
KAFKA_PORT, KAFKA_DIRECT_PORT, KAFKA_CONTROLLER_PORT = 17093, 17094, 17095
SERVICES = (*SUITE, "watch")
TOPICS = (*soak.OUTBOX_TOPICS, "outbox.event.watch")
GROUPS: dict[str, tuple[str, ...]] = {
    **soak.GROUPS, "watch.cases": ("outbox.event.case",), "watch.triggers": ("outbox.event.case",)}
FAULT_KINDS = ("kill", "sigterm", "kill-relay", "pause", "pause-relay", "kill-kafka",
               "pause-kafka", "cut-pg", "latency", "bandwidth", "reset", "half-open",
               "ambiguous-commit", "hold-xmin", "hot-lock", "rebalance", "poison")
_WEIGHTS = {"kill": 3, "sigterm": 2, "kill-relay": 1, "pause": 3, "pause-relay": 1,
            "kill-kafka": 1, "pause-kafka": 1, "cut-pg": 1, "latency": 2, "bandwidth": 1,
            "reset": 2, "half-open": 1, "ambiguous-commit": 3, "hold-xmin": 1, "hot-lock": 2,
            "rebalance": 2, "poison": 1}
#: What a fault kind holds while it runs (besides the instance it picks): two faults holding
#: one thing do not run at once.
_HOLDS = {"kill-kafka": "kafka", "pause-kafka": "kafka", "cut-pg": "pg", "ambiguous-commit": "pg",
          "kill-relay": soak.RELAY_NAME, "pause-relay": soak.RELAY_NAME}


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- the network


class Network:
    """The private broker and the Toxiproxy server with its three proxies; ``env`` is the
    services' environment (the proxies), ``direct_env`` the rig's own (no proxy)."""

    def __init__(self, env: Mapping[str, str], workdir: Path, *, pgbouncer: bool = False) -> None:
        self.workdir = workdir
        shutil.rmtree(workdir / "kafka", ignore_errors=True)
        classpath = Path(env.get("CASESTREAM_LOCAL_DIR", ".local")) / "kafka" / "classpath.txt"
        self.kafka = testing.PrivateKafka(
            classpath, workdir / "kafka", port=KAFKA_PORT, controller=KAFKA_CONTROLLER_PORT,
            advertised=f"127.0.0.1:{PROXY_PORTS['kafka']}", direct_port=KAFKA_DIRECT_PORT)
        self.server = ToxiproxyServer(TOXIPROXY_PORT, workdir / "toxiproxy.log")
        self.proxy: Toxiproxy | None = None
        pg = env["CASESTREAM_PGBOUNCER_URL"] if pgbouncer else env["CASESTREAM_PG_URL"]
        self.upstreams = {"pg": upstream(pg),
                          "registry": upstream(env["CASESTREAM_REGISTRY_URL"]),
                          "kafka": f"127.0.0.1:{KAFKA_PORT}"}
        self.direct_env = {**env, "CASESTREAM_KAFKA_BOOTSTRAP": self.kafka.direct}
        self.env = {**env,
                    "CASESTREAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{PROXY_PORTS['kafka']}",
                    "CASESTREAM_PG_URL": via(env["CASESTREAM_PG_URL"], PROXY_PORTS["pg"]),
                    "CASESTREAM_REGISTRY_URL": via(env["CASESTREAM_REGISTRY_URL"],
                                                          PROXY_PORTS["registry"])}

    def start(self) -> None:
        self.proxy = self.server.start()
        for name, port in PROXY_PORTS.items():
            self.proxy.create(name, f"127.0.0.1:{port}", self.upstreams[name])
        self.kafka.start()

    def restart_kafka(self) -> None:
        self.kafka.kill()
        self.kafka.start(timeout_s=120.0)

    def stop(self) -> None:
        self.kafka.close()
        if self.proxy is not None:
            self.proxy.close()
        self.server.stop()


# ---------------------------------------------------------------- processes and faults


class Suite(soak.Suite):
    """The soak's processes with ``examples/watch`` beside the suite."""

    services = SERVICES


class Holds:
    """What the running faults hold (instances, proxies, the broker, the relay), so that two
    faults never hit one target at once; thread-safe."""

    def __init__(self, rng: random.Random, instances: Iterable[str]) -> None:
        self.rng, self.instances = rng, sorted(instances)
        self.held: set[str] = set()
        self.lock = threading.Lock()

    def take(self, target: str) -> bool:
        """Hold ``target``; False if another fault holds it."""
        with self.lock:
            if target in self.held:
                return False
            self.held.add(target)
            return True

    def release(self, target: str) -> None:
        with self.lock:
            self.held.discard(target)

    def instance(self) -> str:
        """Hold and return an instance no fault holds (any instance when all are held)."""
        with self.lock:
            target = self.rng.choice(sorted(set(self.instances) - self.held) or self.instances)
            self.held.add(target)
        return target

    def dependency(self) -> str | None:
        """Hold and return a proxy no fault holds (None: every one is held)."""
        with self.lock:
            free = sorted(set(PROXY_PORTS) - self.held)
            if not free:
                return None
            name = self.rng.choice(free)
            self.held.add(name)
        return name


class Injector(soak.Injector):
    """The soak's fault loop with the chaos kinds, one to three faults at a time."""

    groups = GROUPS
    kinds = FAULT_KINDS
    weights = _WEIGHTS
    prefix = "chaos"

    def __init__(self, suite: Suite, opts: Options, rng: random.Random, t0: float,
                 net: Network) -> None:
        super().__init__(suite, opts, rng, t0)
        self.net = net
        self.bootstrap = net.kafka.direct
        self.holds = Holds(rng, suite.instances)

    def run(self) -> None:
        queue = list(self.kinds)
        self.rng.shuffle(queue)
        while not self.stop.wait(self.rng.uniform(*self.opts.fault_gap_s)):
            if queue:  # the first round two at a time: every kind soon, each seen with another
                batch, queue = queue[:2], queue[2:]
            else:
                batch = list(dict.fromkeys(self._draw() for _ in range(self.rng.choice((1, 1, 2, 3)))))
            threads = [threading.Thread(target=self.inject, args=(k,), daemon=True) for k in batch]
            for t in threads:
                t.start()
            for t in threads:
                t.join()  # bounded: a restart gives up after its attempts
            if not queue:
                self.first_round.set()

    def inject(self, kind: str) -> Fault:
        hold = _HOLDS.get(kind)
        if hold is not None and not self.holds.take(hold):
            return Fault(at_s=time.monotonic() - self.t0, kind=kind, target=hold,
                         detail="skipped: held by another fault")
        try:
            return super().inject(kind)
        finally:
            if hold is not None:
                self.holds.release(hold)

    def _instance(self) -> str:
        return self.holds.instance()

    def _release(self, target: str) -> None:
        self.holds.release(target)

    def _dependency(self) -> str | None:
        return self.holds.dependency()

    def _kill(self, fault: Fault) -> None:
        try:
            super()._kill(fault)
        finally:
            self._release(fault.target)

    def _sigterm(self, fault: Fault) -> None:
        fault.target = self._instance()
        try:
            stack, name = self.suite.instances[fault.target]
            status = stack.stop(name)
            time.sleep(self.rng.uniform(1.0, 3.0))
            self.suite.revive(fault.target)
            fault.detail = f"SIGTERM, exit {status}"
        finally:
            self._release(fault.target)

    def _pause_pid(self, pid: int, seconds: float) -> None:
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    def _pause(self, fault: Fault) -> None:
        fault.target = self._instance()
        try:
            stack, name = self.suite.instances[fault.target]
            proc = stack.procs.get(name)
            if proc is None or proc.popen.poll() is not None:
                fault.detail = "not running"
                return
            seconds = self.rng.uniform(12.0, 25.0)
            self._pause_pid(proc.popen.pid, seconds)
            fault.detail = f"SIGSTOP {seconds:.1f} s, SIGCONT"
        finally:
            self._release(fault.target)

    def _pause_relay(self, fault: Fault) -> None:
        fault.target = soak.RELAY_NAME
        relay = self.suite.relay
        if relay is None or relay.poll() is not None:
            fault.detail = "not running"
            return
        seconds = self.rng.uniform(12.0, 25.0)
        self._pause_pid(relay.pid, seconds)
        fault.detail = f"SIGSTOP {seconds:.1f} s, SIGCONT"

    def _kill_kafka(self, fault: Fault) -> None:
        fault.target = "kafka (private)"
        self.net.kafka.kill()
        down = self.rng.uniform(2.0, 5.0)
        time.sleep(down)
        self.net.kafka.start(timeout_s=120.0)
        fault.detail = f"SIGKILL, down {down:.1f} s"

    def _pause_kafka(self, fault: Fault) -> None:
        fault.target = "kafka (private)"
        proc = self.net.kafka.proc
        if proc is None:
            fault.detail = "not running"
            return
        seconds = self.rng.uniform(5.0, 15.0)
        os.killpg(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.killpg(proc.pid, signal.SIGCONT)
        fault.detail = f"SIGSTOP {seconds:.1f} s"

    @property
    def _toxi(self) -> Toxiproxy:
        assert self.net.proxy is not None
        return self.net.proxy

    def _cut_pg(self, fault: Fault) -> None:
        fault.target = "pg proxy"
        seconds = self.rng.uniform(2.0, 8.0)
        self._toxi.enable("pg", False)
        try:
            time.sleep(seconds)
        finally:
            self._toxi.enable("pg", True)
        fault.detail = f"disabled {seconds:.1f} s"

    def _toxic(self, fault: Fault, kind: str, seconds: float, streams: Sequence[str],
               **attributes: float) -> None:
        proxy = self._dependency()
        if proxy is None:
            fault.detail = "skipped: every proxy held"
            return
        fault.target = f"{proxy} proxy"
        try:
            names = [self._toxi.add_toxic(proxy, kind, stream=s, **attributes) for s in streams]
            try:
                time.sleep(seconds)
            finally:
                for n in names:
                    self._toxi.remove_toxic(proxy, n)
            shown = ", ".join(f"{k}={v:g}" for k, v in attributes.items())
            fault.detail = f"{kind} {'+'.join(streams)} {shown} for {seconds:.1f} s"
        finally:
            self._release(proxy)

    def _latency(self, fault: Fault) -> None:
        ms = self.rng.randint(200, 1500)
        self._toxic(fault, "latency", self.rng.uniform(5.0, 15.0), ("upstream", "downstream"),
                    latency=ms, jitter=ms // 2)

    def _bandwidth(self, fault: Fault) -> None:
        self._toxic(fault, "bandwidth", self.rng.uniform(5.0, 15.0), ("downstream",),
                    rate=self.rng.randint(16, 64))

    def _reset(self, fault: Fault) -> None:
        self._toxic(fault, "reset_peer", self.rng.uniform(1.0, 3.0), ("upstream",), timeout=0)

    def _half_open(self, fault: Fault) -> None:
        self._toxic(fault, "timeout", self.rng.uniform(5.0, 20.0), ("downstream",), timeout=0)

    def _ambiguous_commit(self, fault: Fault) -> None:
        fault.target = "pg proxy"
        seconds = self.rng.uniform(0.3, 1.5)
        name = self._toxi.add_toxic("pg", "limit_data", stream="downstream", bytes=0)
        try:
            time.sleep(seconds)
        finally:
            self._toxi.remove_toxic("pg", name)
        fault.detail = f"answers dropped and connections closed for {seconds:.1f} s"

    def _hold_xmin(self, fault: Fault) -> None:
        db = self.rng.choice(SUITE)
        fault.target = f"db {db}"
        seconds = self.rng.uniform(15.0, 40.0)
        xid = testing.hold_snapshot(soak._dsn(self.net.direct_env, db),
                                    lambda: self.stop.wait(seconds))
        fault.detail = f"snapshot (xid {xid if xid is not None else '?'}) held {seconds:.0f} s"

    def _hot_lock(self, fault: Fault) -> None:
        fault.target = "db case"
        seconds = self.rng.uniform(3.0, 10.0)
        rows = testing.hold_rows(
            soak._dsn(self.net.direct_env, "case"),
            "SELECT id FROM cases WHERE id IN (SELECT id FROM cases ORDER BY opened_at DESC LIMIT 5)"
            " FOR UPDATE", lambda: time.sleep(seconds))
        fault.detail = f"{len(rows)} newest cases locked FOR UPDATE {seconds:.1f} s"


# ---------------------------------------------------------------- the ledger


#: (topic, partition, offset, key, event id, event type, s since the start by its timestamp)
Record = tuple[str, int, int, str, str, str, float]


class Checker(soak.Checker):
    """The soak's checks (read without a proxy) and the ledger's."""

    groups = GROUPS
    services = SERVICES

    def __init__(self, suite: Suite, direct_env: Mapping[str, str],
                 maildir: Path | None, wall_t0: float) -> None:
        super().__init__(suite, {}, maildir)  # a fresh broker: every offset since 0
        self.env = dict(direct_env)
        self.wall_t0 = wall_t0
        self._records: list[Record] | None = None

    def records(self) -> list[Record]:
        """(topic, partition, offset, key, event id, event type, s since the start by the
        record's timestamp) of every record on the outbox topics, in log order per partition
        (read once)."""
        if self._records is None:
            out = []
            for topic, m in self.topics_since_start(TOPICS):
                h = {k: (v or b"").decode() for k, v in (m.headers() or [])}
                out.append((topic, m.partition(), m.offset(), (m.key() or b"").decode(),
                            h.get("id", ""), h.get("type", ""),
                            m.timestamp()[1] / 1000.0 - self.wall_t0))
            self._records = sorted(out, key=lambda r: (r[0], r[1], r[2]))
        return self._records

    def commands_on_topics(self, commands: Sequence[soak.Command],
                           poison: Mapping[str, str]) -> Check:
        """Every accepted command's event is on its topic: ``CaseOpened`` of an accepted open,
        ``CaseSubmitted`` of an accepted submit, keyed by the case id."""
        by_key: dict[str, set[str]] = defaultdict(set)
        for topic, _p, _o, key, eid, etype, _at in self.records():
            if topic == "outbox.event.case" and eid not in poison:
                by_key[key].add(etype)
        missing, times = [], []
        for c in commands:
            if c.accepted is None:
                continue
            if c.path == "/cases":
                want, case_id = "CaseOpened", c.accepted
            else:
                want, case_id = "CaseSubmitted", c.path.split("/")[2]
            if want not in by_key.get(case_id, set()):
                missing.append(f"{want} of {case_id}")
                times.append(c.at_s)
        accepted = sum(1 for c in commands if c.accepted is not None)
        detail = (f"{len(commands)} commands sent, {accepted} accepted"
                  f" ({sum(len(c.answers) for c in commands)} attempts)")
        if missing:
            detail += f"; accepted but not on the topic: {missing[:5]} ({len(missing)})"
        return Check("every accepted command's events on their topics", not missing, detail, times)

    def one_case_per_open(self, commands: Sequence[soak.Command]) -> Check:
        """One case row per open command: a retried open (its first answer lost to a fault, an
        ambiguous commit) finds its Idempotency-Key and answers the same case. Cases are the
        run's by title (``Soak NNNNN ...``, unique in a run) and opening time."""
        rows = self.query("case", "SELECT title, count(*), array_agg(id::text) FROM cases"
                                  " WHERE title LIKE 'Soak %%' AND opened_at >= to_timestamp(%s)"
                                  " GROUP BY title", (self.wall_t0 - 5.0,))
        opens = [c for c in commands if c.path == "/cases"]
        accepted = {c.accepted for c in opens if c.accepted}
        twice = [f"{t}: {n} cases {ids}" for t, n, ids in rows if n > 1]
        orphans = [i for _t, _n, ids in rows for i in ids if i not in accepted]
        detail = (f"{len(opens)} opens sent ({sum(len(c.answers) > 1 for c in opens)} retried),"
                  f" {len(accepted)} accepted, {sum(n for _t, n, _i in rows)} cases opened")
        if twice:
            detail += f"; one title opened more than once: {twice[:3]}"
        if orphans:
            detail += f"; cases no answer named: {orphans[:3]} ({len(orphans)})"
        return Check("one case per open command", not twice and not orphans, detail)

    def audit_entries(self, poison: Mapping[str, str]) -> Check:
        """The soak's check on the aggregates begun in the run. The service databases outlive
        the rig's broker: an aggregate of an earlier run (a saga whose deadline fires now) has
        its earlier versions on another broker, so audit's version guard holds its new events
        for the gap, as it should; those events are left out and counted."""
        versions = self._versions()
        first: dict[tuple[str, str], int] = {}
        for topic, _p, _o, key, eid, _t, _at in self.records():
            v = versions.get(eid)
            if v is not None:
                first[(topic, key)] = min(v, first.get((topic, key), v))
        older = {key for (_topic, key), v in first.items() if v > 1}
        left_out = {r[4]: r[0] for r in self.records() if r[3] in older}
        check = super().audit_entries({**poison, **left_out})
        check.detail += (f"; {len(left_out)} events of {len(older)} aggregates begun before the"
                         " run left out")
        return check

    def _versions(self) -> dict[str, int]:
        """event id -> aggregate version, from the outbox tables (rows still there)."""
        versions: dict[str, int] = {}
        ids = sorted({r[4] for r in self.records()})
        for db in self.services:
            if db != "audit":
                versions.update({str(i): int(v) for i, v in self.query(
                    db, "SELECT id::text, aggregate_version FROM outbox WHERE id::text = ANY(%s)",
                    (ids,))})
        return versions

    def once_and_in_order(self, poison: Mapping[str, str]) -> list[Check]:
        """:func:`once_and_in_order` of the records read, versions from the outbox tables."""
        return once_and_in_order(self.records(), self._versions(), poison)

    def applied(self, poison: Mapping[str, str]) -> Check:
        """Every event of a type a consumer handles (one it has inbox rows of) is in its
        inbox; the inbox's key (consumer, event_id) keeps it at one."""
        gaps, figures = [], []
        for group, topics in self.groups.items():
            db = group.split(".")[0]
            types = {t for (t,) in self.query(db, "SELECT DISTINCT event_type FROM consumer_inbox"
                                                  " WHERE consumer = %s", (group,))}
            want = {r[4] for r in self.records() if r[0] in topics and r[5] in types
                    and r[4] not in poison}
            have = {i for (i,) in self.query(db, "SELECT event_id FROM consumer_inbox WHERE"
                                                 " consumer = %s AND event_id = ANY(%s)",
                                             (group, sorted(want)))}
            figures.append(f"{group} {len(have)}/{len(want)}")
            if want - have:
                gaps.append(f"{group}: {len(want - have)} missing, e.g. {sorted(want - have)[:2]}")
        detail = "applied/handled events: " + ", ".join(figures)
        if gaps:
            detail += f"; NOT APPLIED: {gaps}"
        return Check("every event applied once per consumer", not gaps, detail)

    def outbox_drained(self) -> Check:
        """No outbox row left pending or failed (read after the drain)."""
        left = []
        for db in self.services:
            if db == "audit":
                continue
            pending, failed = self.query(db, "SELECT count(*) FILTER (WHERE status = 'pending'),"
                                             " count(*) FILTER (WHERE status = 'failed')"
                                             " FROM outbox")[0]
            if pending or failed:
                left.append(f"{db}: {pending} pending, {failed} failed")
        return Check("no outbox row stuck", not left,
                     "; ".join(left) or f"{len(self.services) - 1} outboxes drained")


def once_and_in_order(records: Sequence[Record], versions: Mapping[str, int],
                  poison: Mapping[str, str]) -> list[Check]:
    """Two checks on the outbox topics' ``records`` (``versions``: event id -> aggregate
    version; ``poison`` ids are left out). Order: per (topic, key), each event's *first*
    record comes after the first records of its lower aggregate versions. Once: every event
    id has one record; a second record is told apart as re-published in order or after a
    later version of its key. The relay publishes at least once (``casestream.outbox.relay``:
    a row whose bookkeeping did not commit — a crash, a cut or ambiguous ``COMMIT`` — is
    produced again; with the bookkeeping pipelined, the aggregate's next row may be out
    already), so this check names what exactly-once publication would still need."""
    seen: set[str] = set()
    last: dict[tuple[str, str], int] = {}
    disorder, stale, again, judged = [], [], [], 0
    order_times, dup_times = [], []
    for topic, p, o, key, eid, _t, at_s in records:
        if eid in poison:
            continue
        v = versions.get(eid)
        where = f"{topic}[{p}]@{o} {key} v{v} at +{at_s:.0f} s"
        prev = last.get((topic, key))
        if eid in seen:
            (stale if v is not None and prev is not None and v < prev else again).append(where)
            dup_times.append(at_s)
            continue
        seen.add(eid)
        if v is None:
            continue
        judged += 1
        if prev is not None and v <= prev:
            disorder.append(f"{where} after v{prev}")
            order_times.append(at_s)
        last[(topic, key)] = max(v, prev or 0)
    order = f"{judged} first records of {len(last)} keys judged"
    if disorder:
        order += f"; out of order: {disorder[:5]} ({len(disorder)})"
    once = f"{len(seen)} event ids, {len(stale) + len(again)} records more"
    if again:
        once += f"; re-published in order: {again[:3]} ({len(again)})"
    if stale:
        once += f"; re-published after a later version of the key: {stale[:3]} ({len(stale)})"
    return [Check("first records per key in aggregate-version order", not disorder, order,
                  order_times),
            Check("every event id on the topics exactly once", not stale and not again, once,
                  dup_times)]


# ---------------------------------------------------------------- the report


@dataclass(slots=True)
class Report(soak.Report):
    """The soak's report with the fault timeline beside every violated check."""

    kinds = FAULT_KINDS
    prefix = "chaos"

    def lines(self) -> list[str]:
        out = soak.Report.lines(self)
        for c in self.checks:
            if not c.ok:
                out.append(f"timeline beside FAIL {c.name}:")
                out += [f"  {line}" for line in timeline(self.faults, c.times)]
        return out


def timeline(faults: Sequence[Fault], times: Sequence[float], before_s: float = 30.0,
             after_s: float = 120.0) -> list[str]:
    """The faults that overlap ``[t - before_s, t + after_s]`` of any ``t`` in ``times``
    (every fault when ``times`` is empty), in start order, one line each."""
    def near(f: Fault) -> bool:
        return not times or any(t - before_s <= f.at_s + f.took_s and f.at_s <= t + after_s
                                for t in times)
    return [f"+{f.at_s:6.1f} s .. +{f.at_s + f.took_s:6.1f} s  {f.kind:<16} {f.target:<22}"
            f" {f.detail}" for f in sorted(faults, key=lambda f: f.at_s) if near(f)]


# ---------------------------------------------------------------- the run


def run(opts: Options, env: Mapping[str, str] | None = None,
        out: Callable[[str], None] = say, *, pgbouncer: bool = False) -> Report:
    """One chaos run (see the module docstring); returns its report (also printed).
    ``pgbouncer``: the ``pg`` proxy leads to PgBouncer in transaction pooling mode
    (``CASESTREAM_PGBOUNCER_URL``, ``deploy/infra.sh up pgbouncer``) instead of PostgreSQL."""
    env = dict(os.environ if env is None else env)
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    report = Report(seed=seed)
    t0, wall_t0 = time.monotonic(), time.time()
    net = Network(env, opts.log_dir, pgbouncer=pgbouncer)
    suite = Suite(net.env, opts)
    maildir = Path(env["CASESTREAM_SMTP_MAILDIR"]) if env.get("CASESTREAM_SMTP_MAILDIR") else None
    sampler = testing.WorkSampler(suite.targets, {db: soak._dsn(env, db) for db in SUITE})
    try:
        out(f"chaos: private broker and toxiproxy in {opts.log_dir}; starting"
            f" {len(suite.instances)} instances ("
            + ", ".join(f"{n} x{opts.replicas_of(n)}" for n in SERVICES)
            + f") and a saga relay, {opts.minutes:g} min, seed {seed}")
        net.start()
        suite.stacks[0].create_topics()
        suite.start()
        sampler.start()
        load_s = max(20.0, opts.minutes * 60.0 - (time.monotonic() - t0) - opts.drain_s)
        out(f"chaos: load {opts.rate:g} cases/s with faults for {load_s:.0f} s")
        driver = soak.Driver(suite, opts.rate)
        driver.t0 = t0
        injector = Injector(suite, opts, rng, t0, net)
        soak.load_with_faults(driver, injector, load_s, out, first_round_s=900.0)
        assert net.proxy is not None
        net.proxy.reset()  # no toxic left by an interrupted fault
        report.faults = injector.faults
        report.cases = len(driver.runs)
        checker = Checker(suite, net.direct_env, maildir, wall_t0)
        left = max(opts.drain_s, opts.minutes * 60.0 - (time.monotonic() - t0) - 15.0)
        out(f"chaos: load stopped; {len(driver.runs)} cases, waiting up to {left:.0f} s for them")
        waited = checker.wait_final(driver.runs, left)
        out(f"chaos: waited {waited:.0f} s for the cases to finish")
        sampler.stop()
        report.work = sampler.work()
        report.members = testing.group_members(net.kafka.direct, list(GROUPS))
        opened = {c.accepted: c.at_s for c in driver.commands if c.path == "/cases" and c.accepted}
        final = checker.final_states(driver.runs, driver.failed)
        final.times = [opened.get(r.case_id, 0.0) for r in driver.runs
                       if r.status not in soak.FINAL_CASE_STATES or soak._trail_problems(r)]
        report.checks = [
            final,
            checker.notices(driver.runs),
            checker.audit_entries(injector.poison_ids),
            checker.sagas(driver.runs),
            checker.progress(30.0),
            checker.dead_letters(injector.poison_ids),
            checker.commands_on_topics(driver.commands, injector.poison_ids),
            checker.one_case_per_open(driver.commands),
            *checker.once_and_in_order(injector.poison_ids),
            checker.applied(injector.poison_ids),
            checker.outbox_drained(),
            soak.work_shared(report.work, opts),
        ]
        if injector.errors:
            report.checks.append(Check("every fault injected", False, "; ".join(injector.errors)))
        report.inbox = checker.inbox_sizes()
        report.outbox = checker.outbox_states()
    finally:
        sampler.stop()
        suite.stop()
        net.stop()
        report.elapsed_s = time.monotonic() - t0
    for line in report.lines():
        out(line)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.chaos",
        description="Run the suite and examples/watch through Toxiproxy under a steady stream of"
                    " cases while injecting faults (kills, SIGSTOP zombies, network toxics,"
                    " ambiguous commits, a held xmin, hot locks, broker kills and pauses);"
                    " then check the ledger. Exit 0 only if every check holds.")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="length of the whole run in minutes (default 10)")
    parser.add_argument("--rate", type=float, default=1.0, help="cases per second (default 1)")
    parser.add_argument("--seed", type=int, help="seed of the fault schedule (default random)")
    parser.add_argument("--replicas", type=int, default=2, metavar="N",
                        help="instances of every suite service (default 2; watch runs one)")
    parser.add_argument("--pgbouncer", action="store_true",
                        help="the services reach PostgreSQL through PgBouncer in transaction"
                             " pooling mode (deploy/infra.sh up pgbouncer), behind the proxy")
    parser.add_argument("--log-dir", default=".local/chaos",
                        help="logs, the private broker and toxiproxy (default .local/chaos)")
    args = parser.parse_args(argv)
    if args.minutes < 1 or args.rate <= 0:
        parser.error("--minutes must be >= 1 and --rate > 0")
    if not 1 <= args.replicas <= 5:
        parser.error("--replicas must be 1..5")
    try:
        report = run(Options(minutes=args.minutes, rate=args.rate, seed=args.seed,
                             replicas=soak.every_service(args.replicas), drain_s=60.0,
                             log_dir=Path(args.log_dir)), pgbouncer=args.pgbouncer)
    except (CasestreamError, RuntimeError, KeyError) as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 1
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
