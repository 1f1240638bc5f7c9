"""``casestream topics plan|apply`` against the real broker: create, add partitions, set
configs, refuse to shrink or to plan a topic two services declare, leave undeclared topics
and undeclared configs alone. Each run uses its own topic names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from casestream.cli import main
from casestream.kafka import TopicSpec
from casestream.service import ServiceSpec
from casestream.testing import delete_topics

RUN = uuid.uuid4().hex[:8]
EVENTS = f"test.topics.{RUN}.events"  # owned by "orders"
AUDIT = f"test.topics.{RUN}.audit"  # owned by "orders"
FOREIGN = f"test.topics.{RUN}.foreign"  # declared by no service
LATER = f"test.topics.{RUN}.later"  # declared by "orders" later on
DAY_MS = 86_400_000


def _orders(*topics: TopicSpec) -> ServiceSpec:
    return ServiceSpec(name="orders", module="orders", settings="m:S", build="m:b", topics=topics)


ORDERS = _orders(
    TopicSpec(EVENTS, 3, retention_ms=DAY_MS, cleanup_policy="compact,delete", min_insync_replicas=1,
              config={"max.message.bytes": 2_000_000}),
    TopicSpec(AUDIT, 1))
ORDERS_GROWN = _orders(  # more partitions and a longer retention; a replication factor no cluster here has
    TopicSpec(EVENTS, 6, retention_ms=2 * DAY_MS, cleanup_policy="compact,delete", min_insync_replicas=1,
              config={"max.message.bytes": 2_000_000}),
    TopicSpec(AUDIT, 1, replication_factor=5))
ORDERS_SHRUNK = _orders(  # fewer partitions for EVENTS, and a change for AUDIT that must not happen
    TopicSpec(EVENTS, 2, retention_ms=2 * DAY_MS, cleanup_policy="compact,delete", min_insync_replicas=1,
              config={"max.message.bytes": 2_000_000}),
    TopicSpec(AUDIT, 1, retention_ms=DAY_MS))
ORDERS_SHRUNK_PLUS = _orders(*ORDERS_SHRUNK.topics, TopicSpec(LATER, 2))
BILLING = ServiceSpec(name="billing", module="billing", settings="m:S", build="m:b",
                      topics=(TopicSpec(EVENTS, 3),))


@pytest.fixture
def admin(kafka_bootstrap: str) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka_bootstrap})
    delete_topics(kafka_bootstrap, [EVENTS, AUDIT, FOREIGN, LATER])


def _topics(bootstrap: str, *args: str, **services: str) -> Result:
    refs = {name: f"{__name__}:{attr}" for name, attr in services.items()}
    return CliRunner().invoke(main, ["topics", *args], obj={"bootstrap": bootstrap, "service_refs": refs})


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(timeout=10).topics[topic].partitions)


def _configs(admin: AdminClient, topic: str) -> dict[str, str]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {k: v.value for k, v in future.result(10).items()}


def test_apply_creates_grows_and_configures_the_declared_topics(kafka_bootstrap: str, admin: Any) -> None:
    plan = _topics(kafka_bootstrap, "plan", "--check", orders="ORDERS")
    assert plan.exit_code == 3, plan.output
    assert f"+ create {EVENTS} (service orders): 3 partitions, replication factor broker default, " \
           "cleanup.policy=compact,delete, max.message.bytes=2000000, min.insync.replicas=1, " \
           f"retention.ms={DAY_MS}" in plan.output
    applied = _topics(kafka_bootstrap, "apply", orders="ORDERS")
    assert applied.exit_code == 0, applied.output
    assert f"created topic {EVENTS} (3 partitions) for service orders" in applied.output
    assert _partitions(admin, EVENTS) == 3 and _partitions(admin, AUDIT) == 1
    configs = _configs(admin, EVENTS)
    assert (configs["retention.ms"], configs["cleanup.policy"], configs["min.insync.replicas"],
            configs["max.message.bytes"]) == (str(DAY_MS), "compact,delete", "1", "2000000")
    again = _topics(kafka_bootstrap, "plan", "--check", orders="ORDERS")
    assert (again.exit_code, again.output.strip()) == (0, "0 change(s), 2 topic(s) up to date")

    # a config set by hand that no spec sets stays as it is
    resource = ConfigResource(ResourceType.TOPIC, EVENTS, incremental_configs=[
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    [done] = admin.incremental_alter_configs([resource]).values()
    done.result(10)
    grown = _topics(kafka_bootstrap, "plan", orders="ORDERS_GROWN")
    assert grown.exit_code == 0, grown.output
    assert f"~ partitions {EVENTS} (service orders): 3 -> 6" in grown.output
    assert f"~ config {EVENTS} (service orders): retention.ms {DAY_MS} -> {2 * DAY_MS}" in grown.output
    assert f"! replication {AUDIT} (service orders): " in grown.output
    assert "5 declared; not changed by apply" in grown.output
    applied = _topics(kafka_bootstrap, "apply", orders="ORDERS_GROWN")
    assert applied.exit_code == 0, applied.output
    assert "2 change(s) applied" in applied.output
    assert _partitions(admin, EVENTS) == 6
    configs = _configs(admin, EVENTS)
    assert (configs["retention.ms"], configs["segment.ms"]) == (str(2 * DAY_MS), "3600000")
    final = _topics(kafka_bootstrap, "plan", "--check", orders="ORDERS_GROWN")
    assert final.exit_code == 0 and "0 change(s), 2 topic(s) up to date" in final.output, final.output


def test_shrinking_is_refused_and_nothing_is_applied_nor_an_undeclared_topic_touched(
        kafka_bootstrap: str, admin: Any) -> None:
    assert _topics(kafka_bootstrap, "apply", orders="ORDERS").exit_code == 0
    [made] = admin.create_topics([NewTopic(FOREIGN, 2, config={"retention.ms": "60000"})]).values()
    made.result(10)
    plan = _topics(kafka_bootstrap, "plan", orders="ORDERS_SHRUNK")
    assert plan.exit_code == 1
    assert f"refused: topic {EVENTS} (service orders) has 3 partitions, 2 declared: Kafka cannot " \
           "remove partitions" in plan.output
    applied = _topics(kafka_bootstrap, "apply", orders="ORDERS_SHRUNK")
    assert applied.exit_code == 1
    assert "nothing applied" in applied.output
    assert _partitions(admin, EVENTS) == 3
    assert _configs(admin, AUDIT)["retention.ms"] != str(DAY_MS)  # AUDIT's change was not made
    assert FOREIGN not in plan.output
    assert (_partitions(admin, FOREIGN), _configs(admin, FOREIGN)["retention.ms"]) == (2, "60000")

    # --missing-only (the dev stack's): creates LATER, leaves the refused and changed ones alone
    missing = _topics(kafka_bootstrap, "apply", "--missing-only", orders="ORDERS_SHRUNK_PLUS")
    assert missing.exit_code == 0, missing.output
    assert "1 change(s) to existing topics not applied (--missing-only)" in missing.output
    assert f"created topic {LATER} (2 partitions) for service orders" in missing.output
    assert _partitions(admin, LATER) == 2 and _partitions(admin, EVENTS) == 3
    assert _configs(admin, AUDIT)["retention.ms"] != str(DAY_MS)


def test_a_topic_two_services_declare_is_refused_and_an_unknown_service_is_one_line(
        kafka_bootstrap: str, admin: Any) -> None:
    applied = _topics(kafka_bootstrap, "apply", "--service", "orders", orders="ORDERS", billing="BILLING")
    assert applied.exit_code == 1
    assert f"refused: topic {EVENTS} is declared by services billing and orders" in applied.output
    assert EVENTS not in admin.list_topics(timeout=10).topics and AUDIT not in admin.list_topics(timeout=10).topics
    unknown = _topics(kafka_bootstrap, "plan", "--service", "nope", orders="ORDERS")
    assert unknown.exit_code == 2
    assert unknown.output.strip().splitlines() == ["Error: unknown service 'nope'; installed: orders"]
