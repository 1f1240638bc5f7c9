"""The group protocol of the consumer runtime, without Kafka: ``classic`` (cooperative-sticky)
and ``consumer`` (KIP-848) configs, the settings the new protocol refuses, incremental
revocations (the partitions kept are not treated as revoked) and a fenced static member.

``confluent_kafka.Consumer`` is replaced by an in-memory client class that records its config."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from casestream.consumer import ConsumerFenced, ConsumerRuntime, ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers.registry import HandlerRegistry

CONF = {"bootstrap.servers": "127.0.0.1:1"}


class FakeClient:
    """Stands in for ``confluent_kafka.Consumer``: records the config; pause/resume/seek are no-ops."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass

    def pause(self, partitions: Any) -> None:
        pass

    def resume(self, partitions: Any) -> None:
        pass

    def committed(self, partitions: Any, timeout: float) -> list[Any]:
        return [SimpleNamespace(topic=p.topic, partition=p.partition, offset=5) for p in partitions]


@pytest.fixture(autouse=True)
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeClient)


def _runtime(conf: dict[str, Any] | None = None, **settings: Any) -> ConsumerRuntime:
    return ConsumerRuntime("unit.protocol", ["t"], HandlerRegistry(), object(), object(),
                           {**CONF, **(conf or {})}, ConsumerSettings(**settings))


def _tps(*partitions: int) -> list[Any]:
    return [SimpleNamespace(topic="t", partition=p, offset=0, error=None) for p in partitions]


def test_classic_is_the_default_with_librdkafkas_assignors() -> None:
    conf = _runtime()._new_consumer().conf
    assert conf["group.protocol"] == "classic"
    assert "partition.assignment.strategy" not in conf
    assert conf["session.timeout.ms"] == 45000


def test_classic_accepts_the_cooperative_sticky_assignor() -> None:
    conf = _runtime({"partition.assignment.strategy": "cooperative-sticky"})._new_consumer().conf
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"


def test_consumer_protocol_sets_no_client_side_group_setting() -> None:
    rt = _runtime(group_protocol="consumer")
    conf = rt._new_consumer().conf
    assert conf["group.protocol"] == "consumer"
    assert "session.timeout.ms" not in conf and "partition.assignment.strategy" not in conf
    assert rt.rejoin_after_s == 345.0  # max.poll.interval.ms + the broker's session default


@pytest.mark.parametrize("key", ["partition.assignment.strategy", "session.timeout.ms",
                                 "heartbeat.interval.ms", "group.protocol.type"])
def test_consumer_protocol_refuses_the_settings_it_moves_to_the_broker(key: str) -> None:
    with pytest.raises(ConfigError) as e:
        _runtime({key: "x"}, group_protocol="consumer")
    assert key in str(e.value) and "group_protocol=consumer" in str(e.value)
    assert "\n" not in str(e.value)


def test_group_protocol_is_chosen_by_the_setting_only() -> None:
    with pytest.raises(ConfigError, match="ConsumerSettings.group_protocol"):
        _runtime({"group.protocol": "consumer"})
    with pytest.raises(ConfigError, match="group_protocol must be one of classic, consumer"):
        ConsumerSettings(group_protocol="eager")


def test_an_incremental_revoke_keeps_the_other_partitions_and_starts_no_rejoin_wait() -> None:
    rt = _runtime()
    rt._consumer = rt._new_consumer()
    rt._on_assign(rt._consumer, _tps(0, 1, 2))
    assert rt._unassigned_since is None
    rt._pending = {("t", 0): 10, ("t", 1): 20}
    rt._commit_pending = lambda wait=False: None  # type: ignore[method-assign]
    rt._on_revoke(rt._consumer, _tps(1))
    assert rt._assigned == {("t", 0), ("t", 2)}
    assert rt._pending == {("t", 0): 10}
    assert rt._unassigned_since is None and rt.rejoin_overdue(time.monotonic() + 1e6) is None
    rt._on_revoke(rt._consumer, _tps(0, 2))  # the last ones: now it waits for an assignment
    assert rt._unassigned_since is not None


def test_only_the_revoked_partitions_records_of_a_prefetched_batch_are_stale() -> None:
    rt = _runtime()
    rt._consumer = rt._new_consumer()
    rt._on_assign(rt._consumer, _tps(0, 1))
    rt._commit_pending = lambda wait=False: None  # type: ignore[method-assign]
    fetched_at = rt._generation
    rt._on_revoke(rt._consumer, _tps(1))
    rt._on_assign(rt._consumer, _tps(1))  # given back: fetched again from its commit
    assert rt._forgotten_at.get(("t", 0), -1) <= fetched_at  # its records are kept
    assert rt._forgotten_at[("t", 1)] > fetched_at  # its records are dropped


def test_a_fenced_static_member_stops_with_one_line() -> None:
    rt = _runtime({"group.instance.id": "case-1"})
    rt._consumer = rt._new_consumer()
    # as librdkafka 2.16 delivers it to consume(): code _FATAL, fatal() False, the cause in the text
    err = confluent_kafka.KafkaError(
        confluent_kafka.KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other "
        "consumer with same group.instance.id: Fatal consumer error: ...")
    assert not err.fatal()
    msg = SimpleNamespace(error=lambda: err)
    with pytest.raises(ConsumerFenced) as e:
        rt._records([msg])
    assert "group.instance.id 'case-1'" in str(e.value) and "\n" not in str(e.value)


def test_service_consumer_config_follows_the_protocol_and_the_instance_identity() -> None:
    from casestream.service import CommonSettings

    classic = CommonSettings(instance_id="case-1").consumer_config()
    assert classic["group.instance.id"] == "case-1" and "session.timeout.ms" in classic
    kip848 = CommonSettings(kafka_group_protocol="consumer").consumer_config()
    assert not {"session.timeout.ms", "heartbeat.interval.ms", "group.instance.id"} & set(kip848)
    ConsumerRuntime("unit.protocol", ["t"], HandlerRegistry(), object(), object(), kip848,
                    ConsumerSettings(group_protocol="consumer"))  # accepted as it is


def test_the_members_of_a_static_group_have_one_identity_each() -> None:
    from casestream.consumer import ConsumerGroup

    group = ConsumerGroup(2, "unit.protocol", ["t"], HandlerRegistry(), object(), object(),
                          {**CONF, "group.instance.id": "case-1"}, ConsumerSettings())
    assert [m._conf["group.instance.id"] for m in group.members] == ["case-1#0", "case-1#1"]
