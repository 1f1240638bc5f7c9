"""Declared topics: TopicSpec validation, ServiceSpec.topics, and the plan diff
(casestream.kafka.topicplan: a pure function of declared and observed topics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from casestream.errors import ConfigError
from casestream.kafka import ObservedTopic, TopicSpec, plan_topics
from casestream.service import ServiceSpec, discovery

SUITE = ("case", "decision", "notification", "saga", "audit")


def _service(*topics: TopicSpec, name: str = "orders") -> ServiceSpec:
    return ServiceSpec(name=name, module="orders", settings="m:S", build="m:b", topics=topics)


def test_a_topic_spec_gives_its_configs_as_kafka_names_and_strings() -> None:
    spec = TopicSpec("outbox.event.order", partitions=6, replication_factor=3,
                     retention_ms=86_400_000, cleanup_policy="delete,compact",
                     min_insync_replicas=2, config={"max.message.bytes": 2_097_152,
                                                    "message.timestamp.type": "LogAppendTime"})
    assert spec.cleanup_policy == "compact,delete"
    assert spec.configs() == {"cleanup.policy": "compact,delete", "retention.ms": "86400000",
                              "min.insync.replicas": "2", "max.message.bytes": "2097152",
                              "message.timestamp.type": "LogAppendTime"}
    assert hash(spec) == hash(TopicSpec("outbox.event.order", 6, 3, 86_400_000, "compact,delete", 2,
                                        {"message.timestamp.type": "LogAppendTime",
                                         "max.message.bytes": "2097152"}))
    assert TopicSpec("t", 1).configs() == {"cleanup.policy": "delete"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "bad topic"}, "topic name 'bad topic'"),
    ({"name": ".."}, "not '.' or '..'"),
    ({"name": "x" * 250}, "1 to 249 characters"),
    ({"partitions": 0}, "partitions=0 must be an integer >= 1"),
    ({"partitions": True}, "partitions=True"),
    ({"replication_factor": 0}, "replication_factor=0"),
    ({"retention_ms": 0}, "retention_ms=0 must be milliseconds"),
    ({"retention_ms": -2}, "retention_ms=-2"),
    ({"cleanup_policy": "forever"}, "cleanup_policy='forever'"),
    ({"cleanup_policy": "delete,delete"}, "cleanup_policy='delete,delete'"),
    ({"min_insync_replicas": 0}, "min_insync_replicas=0"),
    ({"replication_factor": 2, "min_insync_replicas": 3}, "exceeds replication_factor=2"),
    ({"config": {"retention.ms": 1}}, "config 'retention.ms': set it with retention_ms="),
    ({"config": {"Max Bytes": 1}}, "config name 'Max Bytes'"),
    ({"config": {"max.message.bytes": None}}, "config max.message.bytes=None"),
    ({"config": [("a", "b")]}, "config must be a mapping"),
])
def test_a_bad_topic_spec_is_one_line_naming_the_field(kwargs: dict, message: str) -> None:
    args = {"name": "outbox.event.order", "partitions": 3, **kwargs}
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as caught:
        TopicSpec(**args)
    assert message in str(caught.value)


def test_a_service_spec_refuses_a_topic_twice_or_not_a_topic_spec() -> None:
    assert _service(TopicSpec("a", 1)).topics == (TopicSpec("a", 1),)
    with pytest.raises(ConfigError, match="service orders: topic a is declared twice"):
        _service(TopicSpec("a", 1), TopicSpec("a", 2))
    with pytest.raises(ConfigError, match="topics holds 'a', not a TopicSpec"):
        _service("a")  # type: ignore[arg-type]
    hash(_service(TopicSpec("a", 1, config={"max.message.bytes": 5})))  # specs stay hashable


def test_installed_specs_declare_the_topics_their_relays_write() -> None:
    found = discovery.services()
    owned = {t.name: name for name, spec in found.items() for t in spec.topics}
    assert {"outbox.event.case": "case", "outbox.event.decision": "decision",
            "outbox.event.notice": "notification", "outbox.event.saga": "saga"}.items() <= owned.items()
    assert found["audit"].topics == ()
    assert all(t.partitions == 6 and t.retention_ms for n, s in found.items() if n in SUITE
               for t in s.topics)


ORDER = TopicSpec("outbox.event.order", partitions=6, retention_ms=604_800_000, min_insync_replicas=2)


def _observed(partitions: int = 6, rf: int = 3, **configs: str) -> dict[str, ObservedTopic]:
    base = {"cleanup.policy": "delete", "retention.ms": "604800000", "min.insync.replicas": "2"}
    return {ORDER.name: ObservedTopic(ORDER.name, partitions, rf, {**base, **configs})}


def test_a_missing_topic_is_created_with_every_config_of_its_spec() -> None:
    plan = plan_topics({"orders": [ORDER]}, {})
    [change] = plan.changes
    assert (change.action, change.topic, change.service, change.partitions) == \
        ("create", ORDER.name, "orders", 6)
    assert dict(change.configs) == ORDER.configs()
    assert plan.pending and not plan.refusals
    assert plan.lines()[0].startswith("+ create outbox.event.order (service orders): 6 partitions")


def test_a_topic_that_matches_needs_nothing() -> None:
    plan = plan_topics({"orders": [ORDER]}, _observed(**{"cleanup.policy": "delete"}))
    assert (plan.changes, plan.notes, plan.refusals, plan.in_sync) == ((), (), (), (ORDER.name,))
    assert plan.lines() == ["0 change(s), 1 topic(s) up to date"]


def test_partitions_grow_and_differing_configs_are_set() -> None:
    plan = plan_topics({"orders": [ORDER]}, _observed(partitions=3, **{"retention.ms": "1000",
                                                                       "cleanup.policy": "compact"}))
    grow, config = plan.changes
    assert (grow.action, grow.partitions, grow.before["partitions"]) == ("partitions", 6, "3")
    assert config.action == "config"
    assert dict(config.configs) == {"retention.ms": "604800000", "cleanup.policy": "delete"}
    assert "retention.ms 1000 -> 604800000" in config.describe()


def test_cleanup_policy_is_compared_as_a_set() -> None:
    compact = TopicSpec("t", 1, cleanup_policy="compact,delete")
    observed = {"t": ObservedTopic("t", 1, 1, {"cleanup.policy": "delete,compact"})}
    assert plan_topics({"s": [compact]}, observed).in_sync == ("t",)


def test_fewer_partitions_than_the_cluster_has_is_refused() -> None:
    plan = plan_topics({"orders": [ORDER]}, _observed(partitions=12))
    assert plan.changes == ()
    assert plan.refusals == ("topic outbox.event.order (service orders) has 12 partitions, "
                             "6 declared: Kafka cannot remove partitions",)
    assert plan.lines()[-1].endswith("1 refused")


def test_a_topic_declared_by_two_services_is_refused_even_when_one_is_planned() -> None:
    declared = {"orders": [ORDER], "billing": [TopicSpec(ORDER.name, 6)], "other": [TopicSpec("x", 1)]}
    plan = plan_topics(declared, {}, ["orders"])
    assert plan.changes == ()
    assert plan.refusals == (f"topic {ORDER.name} is declared by services orders and billing; "
                             "one service owns a topic",)
    assert [c.topic for c in plan_topics(declared, {}, ["other"]).changes] == ["x"]


def test_a_replication_factor_difference_is_a_note_never_a_change() -> None:
    spec = TopicSpec(ORDER.name, 6, replication_factor=3, retention_ms=604_800_000, min_insync_replicas=2)
    plan = plan_topics({"orders": [spec]}, _observed(rf=1))
    assert plan.changes == () and plan.in_sync == (ORDER.name,)
    [note] = plan.notes
    assert "1 on the cluster, 3 declared; not changed by apply" in note.describe()
    unset = TopicSpec(ORDER.name, 6, retention_ms=604_800_000, min_insync_replicas=2)
    assert plan_topics({"orders": [unset]}, _observed(rf=1)).notes == ()


def test_only_declared_topics_are_planned_and_an_unknown_service_is_refused() -> None:
    observed = {**_observed(), "someone.elses": ObservedTopic("someone.elses", 1, 1, {})}
    plan = plan_topics({"orders": [ORDER]}, observed)
    assert [*plan.in_sync, *(c.topic for c in plan.changes)] == [ORDER.name]
    with pytest.raises(ConfigError, match="unknown service 'nope'; installed: orders"):
        plan_topics({"orders": [ORDER]}, {}, ["nope"])


def test_missing_only_keeps_the_creations_and_the_ownership_refusals() -> None:
    shrunk = TopicSpec(ORDER.name, 2)
    declared = {"orders": [shrunk, TopicSpec("new", 1), TopicSpec("both", 1)],
                "billing": [TopicSpec("both", 1)]}
    plan = plan_topics(declared, _observed(partitions=6), ["orders"])
    assert len(plan.refusals) == 2 and len(plan.conflicts) == 1
    reduced = plan.missing_only()
    assert [(c.action, c.topic) for c in reduced.changes] == [("create", "new")]
    assert reduced.refusals == plan.conflicts == (
        "topic both is declared by services orders and billing; one service owns a topic",)
    grown = plan_topics({"orders": [TopicSpec(ORDER.name, 12)]}, _observed()).missing_only()
    assert (grown.changes, grown.refusals, grown.in_sync) == ((), (), (ORDER.name,))


def test_the_suite_declares_what_the_local_infrastructure_creates() -> None:
    """deploy/infra.sh creates the suite's topics from deploy/kafka/topics.conf (6 partitions):
    the specs must say the same, or `casestream topics plan` would report drift on them."""
    conf = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "topics.conf"
    created = {line.split()[0]: int(line.split()[1]) for line in conf.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    declared = {t.name: t for name, spec in discovery.services().items() if name in SUITE
                for t in spec.topics}
    assert {n: (t.partitions, t.retention_ms) for n, t in declared.items()} == \
        {n: (6, ms) for n, ms in created.items()}
