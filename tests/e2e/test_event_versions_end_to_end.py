"""End-to-end: CaseOpened v1, v2 and v3 coexist on the topic and every consumer handles them.

A legacy producer (this test, with the suite's codec) puts CaseOpened v1 and v2 on
``outbox.event.case`` beside the v3 events the case service writes. The running services
must read all three: the audit service journals each old event upcast to v3 (summary from
the v1/v2 description, priority defaulted), and no consumer dead-letters them.
"""

from __future__ import annotations

import time
import uuid
import httpx
import pytest
from confluent_kafka import Producer

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from services.demo import audit_url, case_mix, headers, open_and_submit, wait_final
from casestream.service.devstack import ServiceStack
from casestream.events.envelope import new_event
from casestream.events.registry import ConfluentSchemaRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import derived_event_id, open_codec

LEGACY_PAYLOADS = {
    1: {"title": "Legacy v1 case", "description": "  Filed   by the old intake\nsystem ",
        "severity": 2, "evidence_count": 1, "reporter_email": "old@example.org"},
    2: {"title": "Legacy v2 case", "description": "Filed with a priority", "severity": 3,
        "evidence_count": 0, "reporter_email": "old@example.org", "priority": "HIGH"},
}


@pytest.fixture(scope="module")
def stack(suite_stack: ServiceStack) -> ServiceStack:
    """The shared suite stack (tests/e2e/conftest.py): the legacy events are new cases of
    their own, and the dead letters looked at are those keyed by them."""
    return suite_stack


def produce_legacy(kafka_bootstrap: str, registry_url: str, tenant: str) -> dict[int, str]:
    """Put one CaseOpened per old version on the topic; return {version: case id}."""
    ids: dict[int, str] = {}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True,
                         "acks": "all"})
    with open_codec(load_catalog(schemas_dir()), ConfluentSchemaRegistry(registry_url),
                    auto_register=None) as codec:
        codec.prepare(auto_register=False)
        for version, payload in LEGACY_PAYLOADS.items():
            case_id = str(uuid.uuid4())
            env = new_event(event_type="CaseOpened", event_version=version, aggregate_type="case",
                            aggregate_id=case_id, aggregate_version=1, payload=payload,
                            tenant_id=tenant, source="legacy-intake", actor_id="legacy",
                            correlation_id=case_id)
            producer.produce(codec.topic_for(env), key=case_id.encode(), value=codec.encode(env),
                             headers=codec.headers(env))
            ids[version] = case_id
    assert producer.flush(30) == 0
    return ids


def test_old_and_new_case_opened_versions_are_all_consumed(
    stack: ServiceStack, kafka_bootstrap: str, registry_url: str
) -> None:
    tenant = "tenant-a"
    legacy = produce_legacy(kafka_bootstrap, registry_url, tenant)
    with httpx.Client(timeout=10.0) as client:
        current = [open_and_submit(client, spec) for spec in case_mix(3, failures=0)]
        wait_final(client, current, timeout_s=120)
        assert all(run.trail[0] == "CaseOpened" for run in current), [r.trail for r in current]

        deadline = time.monotonic() + 60
        timelines: dict[int, list[dict]] = {}
        while time.monotonic() < deadline and len(timelines) < len(legacy):
            for version, case_id in legacy.items():
                response = client.get(audit_url(f"/audit/cases/{case_id}"), headers=headers(tenant))
                if response.status_code == 200 and response.json()["events"]:
                    timelines[version] = response.json()["events"]
            time.sleep(0.25)
    assert set(timelines) == set(legacy), f"audit did not journal legacy versions {set(legacy) - set(timelines)}"
    for version, events in timelines.items():
        (opened,) = events
        assert opened["event_type"] == "CaseOpened"
        assert opened["event_version"] == 3, f"v{version} was not upcast to v3: {opened}"
    assert dead_lettered_keys(kafka_bootstrap) & set(legacy.values()) == set()


def dead_lettered_keys(kafka_bootstrap: str) -> set[str]:
    """Keys of every message on the dead-letter topics of the consumers of outbox.event.case."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"dlq-probe-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        topics = consumer.list_topics(timeout=10).topics
        wanted = [t for t in ("audit.journal.dlq", "saga.orchestrator.dlq", "case.dashboard.dlq")
                  if t in topics]
        parts = [TopicPartition(t, p, 0) for t in wanted for p in topics[t].partitions]
        if not parts:
            return set()
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1]
                for tp in parts}
        consumer.assign(parts)
        keys: set[str] = set()
        remaining = {k for k, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            keys.add((msg.key() or b"").decode(errors="replace"))
            if msg.offset() + 1 >= ends[(msg.topic(), msg.partition())]:
                remaining.discard((msg.topic(), msg.partition()))
        return keys
    finally:
        consumer.close()


def test_a_legacy_case_updated_shows_on_the_case_timeline_as_the_typed_events_it_carries(
    stack: ServiceStack, kafka_bootstrap: str, registry_url: str
) -> None:
    """An old producer's generic CaseUpdated is split by the suite's event upcaster
    (casestream_suite_schemas.upcasters.split_case_updated): the audit timeline shows CaseRetitled (with the
    stored event's id) and CaseReprioritized (a derived id), and nothing is dead-lettered."""
    tenant, case_id = "tenant-a", str(uuid.uuid4())
    opened = {"title": "Legacy case", "summary": "Filed by the old intake", "severity": 2,
              "evidence_count": 0, "reporter_email": "old@example.org", "priority": "LOW"}
    common = dict(aggregate_type="case", aggregate_id=case_id, tenant_id=tenant, source="legacy-intake",
                  actor_id="legacy", correlation_id=case_id)
    events = [new_event(event_type="CaseOpened", aggregate_version=1, payload=opened, **common),
              new_event(event_type="CaseUpdated", event_version=1, aggregate_version=2,
                        payload={"title": "Legacy case, renamed", "priority": "high"}, **common)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    with open_codec(load_catalog(schemas_dir()), ConfluentSchemaRegistry(registry_url),
                    auto_register=None) as codec:
        codec.prepare(auto_register=False)
        for env in events:
            producer.produce(codec.topic_for(env), key=case_id.encode(), value=codec.encode(env),
                             headers=codec.headers(env))
    assert producer.flush(30) == 0
    timeline: list[dict] = []
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() < deadline and len(timeline) < 3:
            response = client.get(audit_url(f"/audit/cases/{case_id}"), headers=headers(tenant))
            timeline = response.json().get("events", []) if response.status_code == 200 else []
            time.sleep(0.25)
    # the timeline orders events of one stored event (same occurred_at and version) by event id
    got = {(e["event_type"], e["event_id"], e["aggregate_version"]) for e in timeline[1:]}
    assert timeline[0]["event_type"] == "CaseOpened" and got == {
        ("CaseRetitled", events[1].event_id, 2),
        ("CaseReprioritized", derived_event_id(events[1].event_id, 1), 2)}, timeline
    assert case_id not in dead_lettered_keys(kafka_bootstrap)
