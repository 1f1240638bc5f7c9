"""The event catalog as an AsyncAPI 3.0 document, built from catalogs and service specs.

Pure (stdlib ``json``; PyYAML only for :func:`render` with ``"yaml"``). What the document holds:

- ``channels``: one per topic (channel id = address = topic name), with the messages of the
  event types published on it and, when a service declares the topic (``ServiceSpec.topics``),
  its Kafka channel binding (partitions, replicas, ``retention.ms``, ``cleanup.policy``);
- ``components.messages``: one per (event type, version), id ``<EventType>.v<N>``, its payload
  the composed message schema (envelope + payload record) as an Avro schema in a multi-format
  schema object (``schemaFormat: application/vnd.apache.avro+json;version=1.9.0``), the Kafka
  message binding (key = aggregate id, schema id in the payload, Confluent framing,
  RecordNameStrategy) and ``x-casestream-upcasters``: the steps that read it as a newer version;
- ``operations``: ``<service>.send.<topic>`` (``action: send``) for each topic a service with an
  outbox declares, ``<consumer>.receive.<topic>`` (``action: receive``, Kafka binding
  ``groupId``) for each topic a consumer reads (``ServiceSpec.subscriptions``);
- ``x-casestream-services``: per service, its description, topics, consumers and whether every
  consumer's topics are declared.

The document is built from objects only (a :class:`~casestream.events.catalog.Catalog`, specs
with ``name``, ``description``, ``outbox``, ``topics``, ``consumers``, ``subscriptions``, and an
optional :class:`~casestream.events.upcasting.UpcasterChain`); nothing is started or asked.
Specification: https://www.asyncapi.com/docs/reference/specification/v3.0.0; Kafka bindings
0.5.0: https://github.com/asyncapi/bindings/tree/master/kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from casestream.errors import ConfigError
from casestream.events.catalog import Catalog
from casestream.events.upcasting import UpcasterChain

__all__ = ["ASYNCAPI_VERSION", "AVRO_SCHEMA_FORMAT", "FORMATS", "asyncapi_document", "message_id", "render"]

ASYNCAPI_VERSION = "3.0.0"
#: AsyncAPI 3.0 "Schema formats": Avro 1.9.0 schemas, JSON form.
AVRO_SCHEMA_FORMAT = "application/vnd.apache.avro+json;version=1.9.0"
#: What :func:`render` writes.
FORMATS = ("json", "yaml")
_KAFKA_BINDING = "0.5.0"
#: Confluent wire format: magic byte 0 + 4-byte schema id before the Avro body.
_CONTENT_TYPE = "application/vnd.apache.avro+binary"


def message_id(event_type: str, version: int) -> str:
    """Component id of one version of an event type: ``<EventType>.v<N>``."""
    return f"{event_type}.v{version}"


def _channel_binding(topic: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"cleanup.policy": [p.strip() for p in str(topic.cleanup_policy).split(",") if p.strip()]}
    if topic.retention_ms is not None:
        config["retention.ms"] = int(topic.retention_ms)
    binding: dict[str, Any] = {"topic": topic.name, "partitions": int(topic.partitions),
                               "topicConfiguration": config, "bindingVersion": _KAFKA_BINDING}
    if topic.replication_factor is not None:
        binding["replicas"] = int(topic.replication_factor)
    return binding


def _upcasters(chain: UpcasterChain | None) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(event type, version) -> the steps that start from it."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    if chain is None:
        return out
    events = chain.event_steps()
    for event_type, version in chain.steps():
        if (event_type, version) in events:
            produces = sorted(events[(event_type, version)])
            step = {"kind": "event", "from": version,
                    "produces": [message_id(t, v) for t, v in produces]}
        else:
            step = {"kind": "payload", "from": version, "to": version + 1}
        out.setdefault((event_type, version), []).append(step)
    return out


def asyncapi_document(catalog: Catalog, services: Iterable[Any] = (), *,
                      upcasters: UpcasterChain | None = None,
                      title: str = "casestream event catalog", version: str = "1.0.0",
                      description: str = "") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``catalog`` and ``services`` (see the module docstring).

    Args:
        catalog: the (merged) catalog of every schemas folder.
        services: service specs (:class:`~casestream.service.ServiceSpec` or alike), any order.
        upcasters: the catalog's upcaster chain (``catalog.upcaster_chain()``), or None.
        title, version, description: the document's ``info``.

    Returns:
        A JSON-ready dict.

    Raises:
        ConfigError: two services declare the same topic.
    """
    specs = sorted(services, key=lambda s: s.name)
    owners: dict[str, Any] = {}
    declared: dict[str, Any] = {}
    for spec in specs:
        for topic in spec.topics:
            if topic.name in owners:
                raise ConfigError(f"topic {topic.name} is declared by services {owners[topic.name].name} "
                                  f"and {spec.name}")
            owners[topic.name] = spec
            declared[topic.name] = topic
    reads: dict[str, list[tuple[Any, str]]] = {}  # topic -> [(spec, consumer)]
    for spec in specs:
        for consumer in spec.consumers:
            for topic in spec.subscriptions.get(consumer, ()):
                reads.setdefault(topic, []).append((spec, consumer))

    steps = _upcasters(upcasters)
    messages: dict[str, Any] = {}
    by_topic: dict[str, list[str]] = {}
    for sv in catalog.iter_versions():
        subject = catalog.subject_for(sv.event_type)
        newest = subject.newest
        mid = message_id(sv.event_type, sv.version)
        messages[mid] = {
            "name": sv.event_type,
            "title": f"{sv.event_type} v{sv.version}",
            "summary": str(sv.payload.get("doc") or f"{sv.event_type} event"),
            "contentType": _CONTENT_TYPE,
            "payload": {"schemaFormat": AVRO_SCHEMA_FORMAT, "schema": catalog.schema(sv.event_type, sv.version)},
            "bindings": {"kafka": {
                "key": {"type": "string", "description": "the aggregate id (UTF-8)"},
                "schemaIdLocation": "payload", "schemaIdPayloadEncoding": "confluent",
                "schemaLookupStrategy": "RecordNameStrategy", "bindingVersion": _KAFKA_BINDING}},
            "tags": [{"name": subject.aggregate_type}, {"name": f"owner:{subject.owner}"}],
            "x-casestream-subject": subject.subject,
            "x-casestream-version": sv.version,
            "x-casestream-newest": sv.version == newest,
            "x-casestream-schema-file": sv.path,
            "x-casestream-compatibility": subject.compatibility,
            "x-casestream-upcasters": steps.get((sv.event_type, sv.version), []),
        }
        by_topic.setdefault(subject.topic, []).append(mid)

    channels: dict[str, Any] = {}
    for topic in sorted(set(by_topic) | set(declared) | set(reads)):
        channel: dict[str, Any] = {
            "address": topic,
            "title": topic,
            "messages": {mid: {"$ref": f"#/components/messages/{mid}"} for mid in by_topic.get(topic, [])},
        }
        owner = owners.get(topic)
        channel["description"] = (f"Written by the outbox relay of service {owner.name}." if owner is not None
                                  else "No installed service declares this topic.")
        if topic in declared:
            channel["bindings"] = {"kafka": _channel_binding(declared[topic])}
        channels[topic] = channel

    operations: dict[str, Any] = {}
    for topic, channel in channels.items():
        owner = owners.get(topic)
        refs = [{"$ref": f"#/channels/{topic}/messages/{mid}"} for mid in channel["messages"]]
        if owner is not None and owner.outbox:
            operations[f"{owner.name}.send.{topic}"] = {
                "action": "send", "channel": {"$ref": f"#/channels/{topic}"},
                "title": f"{owner.name} publishes on {topic}",
                "summary": "Events appended to the service's outbox, published by its relay.",
                "tags": [{"name": f"service:{owner.name}"}], "messages": refs,
                "x-casestream-service": owner.name,
            }
        for spec, consumer in reads.get(topic, []):
            operations[f"{consumer}.receive.{topic}"] = {
                "action": "receive", "channel": {"$ref": f"#/channels/{topic}"},
                "title": f"{consumer} reads {topic}",
                "tags": [{"name": f"service:{spec.name}"}], "messages": refs,
                "bindings": {"kafka": {"groupId": {"type": "string", "enum": [consumer]},
                                       "bindingVersion": _KAFKA_BINDING}},
                "x-casestream-service": spec.name, "x-casestream-consumer": consumer,
            }

    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": title, "version": version,
                 "description": description or "Channels (Kafka topics), messages (Avro, one per "
                                               "event type and version), producers and consumers "
                                               "of the installed services.",
                 "x-casestream-upcasters": list(catalog.upcasters)},
        "defaultContentType": _CONTENT_TYPE,
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
        "x-casestream-services": {spec.name: _service(spec, owners) for spec in specs},
    }


def _service(spec: Any, owners: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "description": spec.description,
        "produces": sorted(t for t, s in owners.items() if s is spec and spec.outbox),
        "consumers": {c: list(spec.subscriptions.get(c, ())) for c in spec.consumers},
        "undeclared": [c for c in spec.consumers if c not in spec.subscriptions],
    }


def render(document: Mapping[str, Any], fmt: str = "json") -> str:
    """``document`` as text: ``"json"`` (indented, key order kept) or ``"yaml"`` (PyYAML, block style).

    Raises:
        ConfigError: ``fmt`` is not one of :data:`FORMATS`.
    """
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        import yaml

        return str(yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True, default_flow_style=False))
    raise ConfigError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
