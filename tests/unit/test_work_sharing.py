"""What shows that replicas shared the work: the per-instance gauges (partitions assigned,
relay shards held), the sampler that adds up an instance's incarnations, the check that
names a consumer or relay only one instance worked for, and the replica ports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.handlers.registry import HandlerRegistry
from casestream.consumer.records import ConsumerStats
from casestream.errors import ConfigError
from casestream.outbox.relay.metrics import RelayMetrics
from casestream.service import replica_env
from casestream.telemetry.metrics import MetricsRegistry, render_prometheus
from casestream.telemetry.sources import Sources
from casestream.testing import InstanceWork, Target, WorkSampler, unshared
from casestream.testing import replicas


def _tp(topic: str, partition: int) -> SimpleNamespace:
    return SimpleNamespace(topic=topic, partition=partition)


def test_the_runtime_counts_the_partitions_it_holds_through_assign_and_loss() -> None:
    rt = ConsumerRuntime("unit.share", ["t"], HandlerRegistry(), object(), object(),
                         {"bootstrap.servers": "127.0.0.1:1"}, ConsumerSettings())
    rt._on_assign(None, [_tp("t", 0), _tp("t", 1), _tp("t", 2)])
    assert rt.stats.partitions_assigned == 3
    rt._on_lost(None, [_tp("t", 1)])
    assert rt.stats.partitions_assigned == 2
    rt._on_lost(None, [_tp("t", 0), _tp("t", 2)])
    assert rt.stats.partitions_assigned == 0


def test_partitions_assigned_and_shards_held_are_exported_per_consumer_and_relay() -> None:
    sources = Sources()
    sources.add_consumer("audit.journal#0", ConsumerStats(partitions_assigned=4, stalls=2,
                                                          consumer_restarts=1))
    sources.add_relay("saga.relay", RelayMetrics(shards_held=16))
    registry = MetricsRegistry("unit", sources)
    try:
        text = render_prometheus(registry.collect())
    finally:
        registry.shutdown()
    assert 'consumer_partitions_assigned{consumer="audit.journal#0"} 4.0' in text
    assert 'consumer_stalls_total{consumer="audit.journal#0"} 2.0' in text
    assert 'consumer_client_restarts_total{consumer="audit.journal#0"} 1.0' in text
    assert 'relay_shards_held{relay="saga.relay"} 16.0' in text


def _metrics(applied: int, partitions: int, published: int = 0, shards: int = 0) -> dict:
    return {
        ("consumer_messages_total", (("consumer", "c.x#0"), ("outcome", "applied"))): applied,
        ("consumer_messages_total", (("consumer", "c.x#0"), ("outcome", "duplicates"))): 99.0,
        ("consumer_partitions_assigned", (("consumer", "c.x#0"),)): partitions,
        ("relay_published_total", (("relay", "c.relay"),)): published,
        ("relay_shards_held", (("relay", "c.relay"),)): shards,
    }


def test_the_sampler_adds_up_the_last_sample_of_every_incarnation(monkeypatch) -> None:
    """A restarted instance's counters start at 0: its work is the sum over its processes."""
    answers = {}
    monkeypatch.setattr(replicas, "scrape_metrics", lambda url: answers.get(url))
    targets = {"c#1": Target(100, "http://one")}
    sampler = WorkSampler(lambda: targets, {})
    answers["http://one/metrics"] = _metrics(5, 3, published=7, shards=16)
    sampler.sample()
    answers["http://one/metrics"] = _metrics(8, 2, published=9, shards=10)
    sampler.sample()
    targets["c#1"] = Target(101, "http://one")  # killed and started again: a new process
    answers["http://one/metrics"] = _metrics(4, 1, published=1, shards=32)
    sampler.sample()
    work = sampler.work()["c#1"]
    assert work.applied == {"c.x": 12} and work.published == {"c.relay": 10}
    assert work.partitions_max == {"c.x": 3} and work.shards_max == {"c.relay": 32}
    assert work.incarnations == [100, 101]


def test_lease_owners_are_attributed_to_the_instance_whose_process_id_they_name(monkeypatch) -> None:
    monkeypatch.setattr(replicas, "scrape_metrics", lambda url: None)
    monkeypatch.setattr(replicas, "relay_leases", lambda dsn: {
        "saga.relay/host/100/ab12cd34": 11, "saga.relay-soak/host/200/ef56ab78": 21,
        "other/host/999/00000000": 5})
    sampler = WorkSampler(lambda: {"saga#1": Target(100, "http://x"), "relay": Target(200)},
                          {"saga": "postgresql://unused"})
    sampler.sample()
    work = sampler.work()
    assert work["saga#1"].leases_max == {"saga": 11} and work["relay"].leases_max == {"saga": 21}


def _work(applied: int, partitions: int, published: int = 0, shards: int = 0) -> InstanceWork:
    return InstanceWork(applied={"case.dashboard": applied},
                        partitions_max={"case.dashboard": partitions},
                        published={"case.relay": published}, shards_max={"case.relay": shards})


def test_work_is_shared_only_when_two_instances_of_a_service_did_some() -> None:
    service = lambda instance: instance.split("#")[0]  # noqa: E731
    both = {"case#1": _work(10, 3, 5, 16), "case#2": _work(12, 3, 6, 16), "audit#1": _work(0, 0)}
    assert unshared(both, service) == []
    idle = {"case#1": _work(22, 6, 11, 32), "case#2": _work(0, 0, 0, 0)}
    assert unshared(idle, service) == [
        "case: consumer case.dashboard worked in 1 of 2 instances (case#1)",
        "case: relay case.relay published from 1 of 2 instances (case#1)"]
    # applied events while holding no partition at any sample is not evidence of sharing
    unassigned = {"case#1": _work(22, 6, 11, 32), "case#2": _work(3, 0, 4, 16)}
    assert unshared(unassigned, service)[0].startswith("case: consumer case.dashboard worked in 1")


def test_replica_ports_move_by_100_per_instance_and_keep_everything_else() -> None:
    env = {"CASESTREAM_PG_URL": "postgresql://x", "CASESTREAM_CASE_PORT": "18101"}
    assert replica_env(["case", "audit"], 1, env) == env
    third = replica_env(["case", "audit"], 3, env)
    assert third["CASESTREAM_CASE_PORT"] == "18301" and third["CASESTREAM_AUDIT_PORT"] == "18302"
    assert third["CASESTREAM_PG_URL"] == "postgresql://x"
    with pytest.raises(ConfigError, match="replica index must be >= 1"):
        replica_env(["case"], 0, env)
    with pytest.raises(ConfigError, match="instance 2 would listen on port 65600"):
        replica_env(["case"], 2, {"CASESTREAM_CASE_PORT": "65500"})
