"""How work was shared between the instances of a service, for tests that run replicas.

Not used by services at run time. A test that runs several instances of a service (separate
processes, one database, one consumer group per consumer, relays sharing the outbox shards by
lease) shows that the instances really shared the work with a :class:`WorkSampler`: a thread
that, every ``interval_s`` seconds, reads

- each running instance's ``/metrics``: ``consumer_messages_total{outcome="applied"}`` and
  ``consumer_partitions_assigned`` per consumer, ``relay_published_total`` and
  ``relay_shards_held`` per relay;
- each database's ``outbox_relay_lease`` table: live leases per owner. The owner id is
  ``<relay name>/<host>/<pid>/<random>`` (:class:`casestream.outbox.relay.OutboxRelay`), so a
  lease is attributed to the instance whose process id it names — also an instance without
  HTTP (a standalone ``python -m casestream.outbox.relay``).

An instance killed and started again is a new *incarnation* (a new process id): its
counters start at 0, so the sampler keeps the last sample of every incarnation and adds
them up. A killed incarnation loses what it did after its last sample (at most
``interval_s`` of work): per-instance counts are lower bounds. :func:`group_members` gives
Kafka's own view of each group (members and their partitions, AdminClient
``describe_consumer_groups``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["InstanceWork", "Target", "WorkSampler", "group_members", "relay_leases",
           "scrape_metrics", "unshared"]

log = logging.getLogger(__name__)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True, slots=True)
class Target:
    """One running instance as the sampler sees it: its process id and its HTTP base URL
    (None: no HTTP, e.g. a standalone relay; only its leases are read)."""

    pid: int
    url: str | None = None


@dataclass(slots=True)
class InstanceWork:
    """What one instance (all its incarnations) did.

    Attributes:
        applied: consumer -> events applied (``consumer_messages_total{outcome="applied"}``,
            members ``<consumer>#i`` of a concurrent group added up), summed over incarnations.
        partitions_max: consumer -> most partitions it was assigned at one sample.
        published: relay -> outbox rows published (``relay_published_total``).
        shards_max: relay -> most shards held at one sample (``relay_shards_held``).
        leases_max: database -> most live leases in ``outbox_relay_lease`` at one sample.
        incarnations: process ids seen.
    """

    applied: dict[str, int] = field(default_factory=dict)
    partitions_max: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    shards_max: dict[str, int] = field(default_factory=dict)
    leases_max: dict[str, int] = field(default_factory=dict)
    incarnations: list[int] = field(default_factory=list)


def scrape_metrics(url: str, *, timeout_s: float = 2.0) -> Samples | None:
    """``{(name, sorted label pairs): value}`` of ``url``'s Prometheus text exposition
    (``prometheus_client.parser``); None if it does not answer 200."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        r = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def relay_leases(dsn: str) -> dict[str, int]:
    """Live leases (``locked_until > now()``) per owner id in ``outbox_relay_lease`` of ``dsn``."""
    from casestream.testing.faults import query

    rows = query(dsn, "SELECT locked_by, count(*) FROM outbox_relay_lease"
                      " WHERE locked_by IS NOT NULL AND locked_until > now() GROUP BY locked_by")
    return {str(owner): int(n) for owner, n in rows}


def _owner_pid(owner: str) -> int | None:
    parts = owner.split("/")
    try:
        return int(parts[-2]) if len(parts) >= 4 else None
    except ValueError:
        return None


def group_members(bootstrap: str, groups: Sequence[str], *,
                  timeout_s: float = 10.0) -> dict[str, list[tuple[str, list[str]]]]:
    """Kafka's view of each group: ``group -> [(member client id, ["topic[p]", ...]), ...]``
    (AdminClient ``describe_consumer_groups``; a group that cannot be described: absent)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for group, fut in admin.describe_consumer_groups(list(groups),
                                                     request_timeout=timeout_s).items():
        try:
            desc = fut.result(timeout=timeout_s)
        except Exception as e:  # noqa: BLE001 - reported as absent
            log.warning("describe group %s: %s", group, e)
            continue
        out[group] = sorted(
            (m.client_id, sorted(f"{tp.topic}[{tp.partition}]"
                                 for tp in (m.assignment.topic_partitions if m.assignment else [])))
            for m in desc.members)
    return out


class WorkSampler:
    """Samples the instances' work every ``interval_s`` s until stopped (see the module docstring).

    Args:
        targets: called at every sample: instance name -> :class:`Target` of the process that
            runs it now (an instance down at that moment: absent).
        dsns: database name -> URL of the databases whose ``outbox_relay_lease`` is read.
        interval_s: seconds between samples.
    """

    def __init__(self, targets: Callable[[], Mapping[str, Target]], dsns: Mapping[str, str],
                 *, interval_s: float = 1.0) -> None:
        self._targets = targets
        self._dsns = dict(dsns)
        self.interval_s = interval_s
        self._last: dict[tuple[str, int], Samples] = {}  # (instance, pid) -> last sample
        self._work: dict[str, InstanceWork] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WorkSampler:
        self._thread = threading.Thread(target=self._run, name="work-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take one last sample and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failed sample (infrastructure down) is skipped
                log.debug("work sample failed", exc_info=True)

    def sample(self) -> None:
        """One sample of every target's metrics and every database's leases."""
        targets = dict(self._targets())
        for instance, target in targets.items():
            samples = scrape_metrics(f"{target.url}/metrics") if target.url else None
            with self._lock:
                work = self._work.setdefault(instance, InstanceWork())
                if target.pid not in work.incarnations:
                    work.incarnations.append(target.pid)
                if samples is not None:
                    self._last[(instance, target.pid)] = samples
                    _maxima(work, samples)
        by_pid = {t.pid: name for name, t in targets.items()}
        for db, dsn in self._dsns.items():
            try:
                leases = relay_leases(dsn)
            except Exception:  # noqa: BLE001 - database restarting: no lease sample this time
                continue
            held: dict[str, int] = {}
            for owner, n in leases.items():
                instance = by_pid.get(_owner_pid(owner) or -1)
                if instance is not None:
                    held[instance] = held.get(instance, 0) + n
            with self._lock:
                for instance, n in held.items():
                    work = self._work.setdefault(instance, InstanceWork())
                    work.leases_max[db] = max(work.leases_max.get(db, 0), n)

    def work(self) -> dict[str, InstanceWork]:
        """Instance -> what it did, counters summed over its incarnations' last samples."""
        with self._lock:
            out = {}
            for instance, w in self._work.items():
                applied: dict[str, int] = {}
                published: dict[str, int] = {}
                for (inst, _pid), samples in self._last.items():
                    if inst != instance:
                        continue
                    for (name, labels), v in samples.items():
                        lab = dict(labels)
                        if name == "consumer_messages_total" and lab.get("outcome") == "applied":
                            c = lab.get("consumer", "").split("#")[0]
                            applied[c] = applied.get(c, 0) + int(v)
                        elif name == "relay_published_total":
                            r = lab.get("relay", "")
                            published[r] = published.get(r, 0) + int(v)
                out[instance] = InstanceWork(applied=applied, partitions_max=dict(w.partitions_max),
                                             published=published, shards_max=dict(w.shards_max),
                                             leases_max=dict(w.leases_max),
                                             incarnations=list(w.incarnations))
            return out


def _maxima(work: InstanceWork, samples: Samples) -> None:
    assigned: dict[str, int] = {}
    for (name, labels), v in samples.items():
        lab = dict(labels)
        if name == "consumer_partitions_assigned":
            c = lab.get("consumer", "").split("#")[0]
            assigned[c] = assigned.get(c, 0) + int(v)
        elif name == "relay_shards_held":
            r = lab.get("relay", "")
            work.shards_max[r] = max(work.shards_max.get(r, 0), int(v))
    for c, n in assigned.items():
        work.partitions_max[c] = max(work.partitions_max.get(c, 0), n)


def unshared(work: Mapping[str, InstanceWork], service_of: Callable[[str], str]) -> list[str]:
    """Problems: a consumer or a relay of a service with several instances that fewer than two
    of them did work for (applied events while assigned partitions; published rows while
    holding leases). ``service_of`` maps an instance name to its service. Empty: shared."""
    by_service: dict[str, dict[str, InstanceWork]] = {}
    for instance, w in work.items():
        by_service.setdefault(service_of(instance), {})[instance] = w
    problems = []
    for service, instances in sorted(by_service.items()):
        if len(instances) < 2:
            continue
        consumers = sorted({c for w in instances.values() for c in w.applied})
        for c in consumers:
            doers = [i for i, w in instances.items()
                     if w.applied.get(c, 0) > 0 and w.partitions_max.get(c, 0) > 0]
            if len(doers) < 2:
                problems.append(f"{service}: consumer {c} worked in {len(doers)} of"
                                f" {len(instances)} instances ({', '.join(doers) or 'none'})")
        relays = sorted({r for w in instances.values() for r in w.published})
        for r in relays:
            doers = [i for i, w in instances.items()
                     if w.published.get(r, 0) > 0 and (w.shards_max.get(r, 0) > 0
                                                       or any(w.leases_max.values()))]
            if len(doers) < 2:
                problems.append(f"{service}: relay {r} published from {len(doers)} of"
                                f" {len(instances)} instances ({', '.join(doers) or 'none'})")
    return problems
