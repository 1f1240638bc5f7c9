"""Declared topics and the plan that brings a cluster to them (pure: no driver imports).

A service declares the topics it owns as :class:`TopicSpec` values in its
:class:`~casestream.service.ServiceSpec` (``topics=(...)``). :func:`plan_topics` compares
what the installed services declare with what the cluster reports (:class:`ObservedTopic`,
read by :mod:`casestream.kafka.topicadmin`) and returns a :class:`TopicPlan`: topics to
create, partitions to add, topic configs to set; what Kafka cannot do in place (fewer
partitions) or what no single service owns (a topic declared twice) is refused, and a
replication-factor difference is only reported (Kafka changes it by a partition
reassignment, ``kafka-reassign-partitions``, not by a topic config).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from casestream.errors import ConfigError

__all__ = ["ObservedTopic", "TopicChange", "TopicPlan", "TopicSpec", "declared_owners", "plan_topics", "same_config"]

# Kafka's legal topic names (org.apache.kafka.common.internals.Topic: at most 249 of these).
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9]+)*$")
_CLEANUP = frozenset({"delete", "compact"})
# Set through their own fields, so that one spec cannot say them twice.
_FIELD_CONFIGS = {"retention.ms": "retention_ms", "cleanup.policy": "cleanup_policy",
                  "min.insync.replicas": "min_insync_replicas"}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _config_value(value: Any) -> str:
    """A topic config value as Kafka's admin API takes and reports it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _normal_cleanup(value: str) -> str:
    """``cleanup.policy`` in one spelling (Kafka accepts the list in any order)."""
    return ",".join(sorted(p.strip() for p in value.split(",") if p.strip()))


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic a service owns: created, grown and configured by ``casestream topics apply``
    and by the dev stack.

    Attributes:
        name: the topic name (Kafka: ``[a-zA-Z0-9._-]``, 1 to 249 characters, not ``.``/``..``).
        partitions: number of partitions (>= 1). Kafka can add partitions, never remove them;
            adding changes which partition a key goes to (per-key order holds only for the
            records written after the change).
        replication_factor: copies of each partition; None (default): the broker's
            ``default.replication.factor``. Only checked on an existing topic (changing it
            needs a partition reassignment).
        retention_ms: topic config ``retention.ms``: how long records are kept, in
            milliseconds; -1 keeps them forever; None (default): the broker's
            ``log.retention.ms`` (7 days). A projection rebuilt by replay restores only what
            its topics still hold.
        cleanup_policy: topic config ``cleanup.policy``: ``"delete"`` (default),
            ``"compact"`` or ``"compact,delete"``.
        min_insync_replicas: topic config ``min.insync.replicas``: replicas that must have a
            write before an ``acks=all`` producer (the relay) is answered; None (default):
            the broker's. At most ``replication_factor`` when both are given.
        config: any other topic config (Kafka's topic-level names, e.g.
            ``{"max.message.bytes": 2097152}``); values are given to Kafka as strings.

    Raises:
        ConfigError: on construction, one line naming the topic and the field.
    """

    name: str
    partitions: int
    replication_factor: int | None = None
    retention_ms: int | None = None
    cleanup_policy: str = "delete"
    min_insync_replicas: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _TOPIC.fullmatch(name) or name in (".", ".."):
            raise ConfigError(f"topic name {name!r}: letters, digits, '.', '_' and '-', 1 to 249 "
                              "characters, not '.' or '..'")
        if not _positive_int(self.partitions):
            raise ConfigError(f"topic {name}: partitions={self.partitions!r} must be an integer >= 1")
        if self.replication_factor is not None and not _positive_int(self.replication_factor):
            raise ConfigError(f"topic {name}: replication_factor={self.replication_factor!r} "
                              "must be an integer >= 1 or None (the broker's default)")
        retention = self.retention_ms
        if retention is not None and not (isinstance(retention, int) and not isinstance(retention, bool)
                                          and (retention == -1 or retention >= 1)):
            raise ConfigError(f"topic {name}: retention_ms={retention!r} must be milliseconds "
                              ">= 1, -1 (forever) or None (the broker's default)")
        policy = self.cleanup_policy
        parts = [p.strip() for p in policy.split(",")] if isinstance(policy, str) else []
        if not parts or not set(parts) <= _CLEANUP or len(set(parts)) != len(parts):
            raise ConfigError(f"topic {name}: cleanup_policy={policy!r} must be 'delete', "
                              "'compact' or 'compact,delete'")
        object.__setattr__(self, "cleanup_policy", _normal_cleanup(policy))
        isr = self.min_insync_replicas
        if isr is not None and not _positive_int(isr):
            raise ConfigError(f"topic {name}: min_insync_replicas={isr!r} must be an integer >= 1 "
                              "or None (the broker's default)")
        if isr is not None and self.replication_factor is not None and isr > self.replication_factor:
            raise ConfigError(f"topic {name}: min_insync_replicas={isr} exceeds "
                              f"replication_factor={self.replication_factor}: no write could succeed")
        if not isinstance(self.config, Mapping):
            raise ConfigError(f"topic {name}: config must be a mapping of topic config names to values")
        extra: dict[str, str] = {}
        for key, value in self.config.items():
            if key in _FIELD_CONFIGS:
                raise ConfigError(f"topic {name}: config {key!r}: set it with "
                                  f"{_FIELD_CONFIGS[key]}=")
            if not isinstance(key, str) or not _CONFIG_NAME.fullmatch(key):
                raise ConfigError(f"topic {name}: config name {key!r} is not a Kafka topic config "
                                  "name (e.g. 'max.message.bytes')")
            if value is None or not isinstance(value, (str, int, float, bool)):
                raise ConfigError(f"topic {name}: config {key}={value!r}: a string, number or bool")
            extra[key] = _config_value(value)
        object.__setattr__(self, "config", MappingProxyType(extra))

    def __hash__(self) -> int:
        return hash((self.name, self.partitions, self.replication_factor, self.retention_ms,
                     self.cleanup_policy, self.min_insync_replicas, tuple(sorted(self.config.items()))))

    def configs(self) -> dict[str, str]:
        """The topic configs this spec sets (Kafka names, string values): ``cleanup.policy``,
        ``retention.ms`` and ``min.insync.replicas`` when given, and ``config``."""
        out = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        if self.min_insync_replicas is not None:
            out["min.insync.replicas"] = str(self.min_insync_replicas)
        out.update(self.config)
        return out


@dataclass(frozen=True, slots=True)
class ObservedTopic:
    """A topic as the cluster reports it.

    Attributes:
        name: the topic name.
        partitions: its partition count.
        replication_factor: replicas per partition (the smallest over its partitions).
        configs: the current value of its topic configs (at least those a spec sets).
    """

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicChange:
    """One step of a plan.

    Attributes:
        action: ``"create"``, ``"partitions"`` (add partitions up to ``partitions``),
            ``"config"`` (set ``configs``) or ``"replication"`` (reported, never applied).
        topic: the topic name.
        service: the service declaring it.
        spec: its declaration.
        partitions: the target partition count (``create``, ``partitions``).
        configs: the configs to set (``create``: all the spec's; ``config``: the differing ones).
        before: what the cluster has, for the message (``partitions``, ``config``, ``replication``).
    """

    action: str
    topic: str
    service: str
    spec: TopicSpec
    partitions: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)
    before: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for ``casestream topics plan``."""
        head = f"{self.topic} (service {self.service})"
        if self.action == "create":
            rf = self.spec.replication_factor or "broker default"
            settings = ", ".join(f"{k}={v}" for k, v in sorted(self.configs.items()))
            return f"+ create {head}: {self.partitions} partitions, replication factor {rf}, {settings}"
        if self.action == "partitions":
            return f"~ partitions {head}: {self.before['partitions']} -> {self.partitions}"
        if self.action == "config":
            diff = ", ".join(f"{k} {self.before.get(k, '(unset)')} -> {v}"
                             for k, v in sorted(self.configs.items()))
            return f"~ config {head}: {diff}"
        return (f"! replication {head}: {self.before['replication_factor']} on the cluster, "
                f"{self.spec.replication_factor} declared; not changed by apply (Kafka changes "
                "it by a partition reassignment: kafka-reassign-partitions)")


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """What ``casestream topics apply`` would do.

    Attributes:
        changes: creations, partition increases and config changes, in topic order.
        notes: replication-factor differences (reported, never applied).
        refusals: one line each: fewer partitions declared than the cluster has, a topic
            declared by two services. A plan with refusals is not applied at all.
        in_sync: topics that need nothing.
        conflicts: the refusals of topics two services declare (also in ``refusals``).
    """

    changes: tuple[TopicChange, ...] = ()
    notes: tuple[TopicChange, ...] = ()
    refusals: tuple[str, ...] = ()
    in_sync: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        """Whether ``apply`` has something to do."""
        return bool(self.changes)

    def missing_only(self) -> TopicPlan:
        """This plan reduced to creating the missing topics: existing topics are left as
        they are (their differences, refused or not, are dropped); a topic two services
        declare stays refused."""
        creates = tuple(c for c in self.changes if c.action == "create")
        left = tuple(c.topic for c in self.changes if c.action != "create")
        return TopicPlan(creates, (), self.conflicts,
                         tuple(dict.fromkeys([*self.in_sync, *left])), self.conflicts)

    def lines(self) -> list[str]:
        """The plan as text: one line per change, note and refusal, then a summary."""
        out = [c.describe() for c in self.changes] + [n.describe() for n in self.notes]
        out += [f"refused: {r}" for r in self.refusals]
        out.append(f"{len(self.changes)} change(s), {len(self.in_sync)} topic(s) up to date"
                   + (f", {len(self.refusals)} refused" if self.refusals else ""))
        return out


def declared_owners(declared: Mapping[str, Iterable[TopicSpec]]) -> dict[str, list[str]]:
    """Topic name -> the services declaring it (in ``declared`` order)."""
    owners: dict[str, list[str]] = {}
    for service, specs in declared.items():
        for spec in specs:
            owners.setdefault(spec.name, []).append(service)
    return owners


def plan_topics(declared: Mapping[str, Sequence[TopicSpec]],
                observed: Mapping[str, ObservedTopic],
                services: Collection[str] | None = None) -> TopicPlan:
    """The plan that brings the cluster to the declared topics.

    Args:
        declared: service name -> the topics it declares, for every installed service (a
            topic declared by two of them is refused even when only one is planned).
        observed: topic name -> what the cluster reports; a declared topic absent from it is
            created. Topics nobody declares are never part of the plan.
        services: plan only these services' topics (default: all of ``declared``).

    Returns:
        The :class:`TopicPlan`. Partitions: more declared -> added; fewer -> refused (Kafka
        cannot remove partitions). Configs: each config the spec sets that differs is set
        (``cleanup.policy`` compared as a set); configs the spec does not set are left as
        they are. Replication factor: a difference is a note.

    Raises:
        ConfigError: a name in ``services`` is not in ``declared``.
    """
    wanted = list(declared) if services is None else list(services)
    unknown = [s for s in wanted if s not in declared]
    if unknown:
        raise ConfigError(f"unknown service {unknown[0]!r}; installed: {', '.join(declared) or 'none'}")
    owners = declared_owners(declared)
    changes: list[TopicChange] = []
    notes: list[TopicChange] = []
    refusals: list[str] = []
    conflicts: list[str] = []
    in_sync: list[str] = []
    seen: set[str] = set()
    for service in wanted:
        for spec in declared[service]:
            if spec.name in seen:
                continue
            seen.add(spec.name)
            if len(set(owners[spec.name])) > 1:
                conflicts.append(f"topic {spec.name} is declared by services "
                                 f"{' and '.join(dict.fromkeys(owners[spec.name]))}; one service owns a topic")
                refusals.append(conflicts[-1])
                continue
            found = observed.get(spec.name)
            if found is None:
                changes.append(TopicChange("create", spec.name, service, spec,
                                           partitions=spec.partitions, configs=spec.configs()))
                continue
            before = len(changes)
            if spec.partitions < found.partitions:
                refusals.append(f"topic {spec.name} (service {service}) has {found.partitions} "
                                f"partitions, {spec.partitions} declared: Kafka cannot remove partitions")
                continue
            if spec.partitions > found.partitions:
                changes.append(TopicChange("partitions", spec.name, service, spec,
                                           partitions=spec.partitions,
                                           before={"partitions": str(found.partitions)}))
            differing = {k: v for k, v in spec.configs().items()
                         if not same_config(k, found.configs.get(k), v)}
            if differing:
                changes.append(TopicChange("config", spec.name, service, spec, configs=differing,
                                           before={k: found.configs[k] for k in differing
                                                   if found.configs.get(k) is not None}))
            if spec.replication_factor is not None and spec.replication_factor != found.replication_factor:
                notes.append(TopicChange("replication", spec.name, service, spec,
                                         before={"replication_factor": str(found.replication_factor)}))
            if len(changes) == before:
                in_sync.append(spec.name)
    return TopicPlan(tuple(changes), tuple(notes), tuple(refusals), tuple(in_sync), tuple(conflicts))


def same_config(key: str, current: str | None, wanted: str) -> bool:
    """Whether topic config ``key`` reported as ``current`` (None: not reported) is ``wanted``
    (``cleanup.policy`` compared as a set)."""
    if current is None:
        return False
    if key == "cleanup.policy":
        return _normal_cleanup(current) == _normal_cleanup(wanted)
    return current == wanted
