"""Reading declared topics off a cluster and applying a :class:`~casestream.kafka.topicplan.TopicPlan`
(driver module: confluent-kafka ``AdminClient``).

:func:`observe_topics` reads partitions, replication factor and configs of the declared
topics that exist (Metadata, DescribeConfigs); :func:`apply_topic_plan` runs a plan's
changes: CreateTopics, CreatePartitions and IncrementalAlterConfigs (``SET`` of the
differing configs only: configs a spec does not set are left alone). Topics are listed
with one whole-cluster Metadata request rather than one per topic: a Metadata request
naming a missing topic may create it on a broker with ``auto.create.topics.enable=true``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic, ResourceType

from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, client_config
from casestream.kafka.topicplan import ObservedTopic, TopicPlan, TopicSpec, same_config
from casestream.kafka.topics import describe_topic_configs

__all__ = ["apply_topic_plan", "observe_topics", "topic_admin"]


def topic_admin(target: KafkaTarget) -> AdminClient:
    """An ``AdminClient`` on ``target`` (bootstrap string or client config with its security
    properties). librdkafka's own log stops at ``log_level`` 2 unless ``target`` sets it: a
    broker that does not answer is reported once, by the request that failed, rather than as
    a connection-failure line every 50 ms on stderr.

    Raises:
        ConfigError: no ``bootstrap.servers``.
    """
    config = client_config(target)
    config.setdefault("log_level", 2)
    return AdminClient(config)


def observe_topics(admin: AdminClient, specs: Iterable[TopicSpec],
                   timeout_s: float = 10.0) -> dict[str, ObservedTopic]:
    """The declared topics that exist on the cluster, with their partition count, smallest
    replication factor and the current value of every config one of them sets.

    Raises:
        KafkaException: the cluster did not answer within ``timeout_s``.
    """
    specs = list(specs)
    listed = admin.list_topics(timeout=timeout_s).topics
    present = {s.name: s for s in specs if s.name in listed and listed[s.name].error is None}
    names = sorted({k for s in present.values() for k in s.configs()})
    configs = describe_topic_configs(admin, present, names, timeout_s)
    out = {}
    for name in present:
        partitions = listed[name].partitions
        replicas = min((len(p.replicas) for p in partitions.values()), default=0)
        out[name] = ObservedTopic(name, len(partitions), replicas, configs.get(name, {}))
    return out


def apply_topic_plan(admin: AdminClient, plan: TopicPlan, *, timeout_s: float = 30.0,
                     echo: Callable[[str], Any] = print) -> None:
    """Apply ``plan``'s changes (never its notes), reporting each step done with ``echo``,
    then wait until every created or grown topic lists all its partitions with a leader.

    Raises:
        ValueError: the plan has refusals (nothing is applied).
        CasestreamError: the cluster refused or did not answer a step, one line with
            Kafka's reason (the steps before it stay applied; running the plan again
            continues from there).
    """
    if plan.refusals:
        raise ValueError(f"the plan has refusals: {plan.refusals[0]}")
    try:
        _apply(admin, plan, timeout_s, echo)
    except KafkaException as e:
        error = e.args[0] if e.args else None
        reason = error.str() if isinstance(error, KafkaError) else str(e)
        raise CasestreamError(f"Kafka refused or did not answer: {reason}") from None
    except TimeoutError:
        raise CasestreamError(f"Kafka did not answer within {timeout_s:g} s") from None


def _apply(admin: AdminClient, plan: TopicPlan, timeout_s: float, echo: Callable[[str], Any]) -> None:
    creates = [c for c in plan.changes if c.action == "create"]
    grows = [c for c in plan.changes if c.action == "partitions"]
    alters = [c for c in plan.changes if c.action == "config"]
    if creates:
        futures = admin.create_topics(
            [NewTopic(c.topic, num_partitions=c.partitions,
                      replication_factor=c.spec.replication_factor or -1, config=dict(c.configs))
             for c in creates], operation_timeout=timeout_s, request_timeout=timeout_s)
        for c in creates:
            try:
                futures[c.topic].result(timeout=timeout_s)
            except KafkaException as e:
                # created since it was observed (another apply, a producer's auto-creation):
                # the next plan compares it with its spec
                if not (e.args and isinstance(e.args[0], KafkaError)
                        and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
                echo(f"topic {c.topic} was created meanwhile; run plan again to compare it")
                continue
            echo(f"created topic {c.topic} ({c.partitions} partitions) for service {c.service}")
    if grows:
        futures = admin.create_partitions([NewPartitions(c.topic, c.partitions) for c in grows],
                                          operation_timeout=timeout_s, request_timeout=timeout_s)
        for c in grows:
            futures[c.topic].result(timeout=timeout_s)
            echo(f"topic {c.topic}: {c.before['partitions']} -> {c.partitions} partitions")
    if alters:
        resources = [ConfigResource(ResourceType.TOPIC, c.topic, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in sorted(c.configs.items())]) for c in alters]
        futures = {r.name: f for r, f in admin.incremental_alter_configs(
            resources, request_timeout=timeout_s).items()}
        for c in alters:
            futures[c.topic].result(timeout=timeout_s)
            echo(f"topic {c.topic}: set " + ", ".join(f"{k}={v}" for k, v in sorted(c.configs.items())))
    _wait_for_leaders(admin, {c.topic: c.partitions for c in [*creates, *grows]}, timeout_s)
    _wait_for_configs(admin, {c.topic: dict(c.configs) for c in alters}, timeout_s)


def _wait_for_configs(admin: AdminClient, wanted: dict[str, dict[str, str]], timeout_s: float) -> None:
    """Wait until DescribeConfigs reports the configs just set (a broker answers from its copy
    of the cluster metadata, which follows the change shortly), so a plan made next is empty.

    Raises:
        KafkaException: not so after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while wanted:
        names = sorted({k for configs in wanted.values() for k in configs})
        current = describe_topic_configs(admin, wanted, names, timeout_s)
        wanted = {t: c for t, c in wanted.items()
                  if not all(same_config(k, current.get(t, {}).get(k), v) for k, v in c.items())}
        if not wanted:
            return
        if time.monotonic() >= deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "topic configs not reported "
                                            f"as set after {timeout_s:g} s: {', '.join(sorted(wanted))}"))
        time.sleep(0.2)


def _wait_for_leaders(admin: AdminClient, wanted: dict[str, int], timeout_s: float) -> None:
    """Wait until each topic lists ``wanted[topic]`` partitions, each with a leader, so that a
    producer or consumer started next sees them.

    Raises:
        KafkaException: not so after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while wanted:
        try:
            listed = admin.list_topics(timeout=max(0.1, deadline - time.monotonic())).topics
        except KafkaException:
            listed = {}
        wanted = {t: n for t, n in wanted.items()
                  if t not in listed or listed[t].error is not None
                  or len(listed[t].partitions) < n
                  or any(p.leader < 0 for p in listed[t].partitions.values())}
        if not wanted:
            return
        if time.monotonic() >= deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "topics without all their "
                                            f"partitions led after {timeout_s:g} s: {', '.join(sorted(wanted))}"))
        time.sleep(0.2)
