"""A case's journey read from the real broker: bounded by the newest ``max_messages`` per topic
(the cost does not grow with the topic), across topics, missing topics skipped."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from casestream.kafka.topics import read_messages
from casestream.operations import load_journey
from casestream.testing import create_topics, delete_topics
from tests.support.events import case_returned

FILLER = 3000


@pytest.fixture
def topics(kafka_bootstrap: str):  # noqa: ANN201
    run = uuid.uuid4().hex[:8]
    cases, sagas = f"test.journey-{run}.case", f"test.journey-{run}.saga"
    create_topics(kafka_bootstrap, [cases], partitions=3)
    create_topics(kafka_bootstrap, [sagas], partitions=2)
    try:
        yield cases, sagas, f"test.journey-{run}.missing"
    finally:
        delete_topics(kafka_bootstrap, [cases, sagas])


def test_a_journey_reads_only_the_newest_messages_of_each_topic(kafka_bootstrap, codec, topics) -> None:  # noqa: ANN001
    cases, sagas, missing = topics
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})

    def send(topic: str, env) -> None:  # noqa: ANN001
        p.produce(topic, key=env.aggregate_id.encode(), value=codec.encode(env), headers=codec.headers(env))

    old, new = f"old-{uuid.uuid4()}", f"new-{uuid.uuid4()}"
    for v in (1, 2):
        send(cases, case_returned(old, v))
    for i in range(FILLER):
        send(cases, case_returned(f"other-{i}", 1))
    for v in (1, 2, 3):
        send(cases, case_returned(new, v))
    related = f"related-{uuid.uuid4()}"  # another aggregate, correlated with the new case
    send(sagas, replace(case_returned(related, 1), correlation_id=new))
    assert p.flush(30) == 0

    # 3 partitions of ~1,000 each: 100 newest of each read, not the 3,005
    assert len(read_messages(kafka_bootstrap, [cases], newest=300)) == 300

    journey = load_journey(kafka_bootstrap, new, [cases, sagas, missing], codec, max_messages=300)
    assert sorted((e.aggregate_id, e.aggregate_version) for e in journey.events) \
        == sorted([(new, 1), (new, 2), (new, 3), (related, 1)])
    assert journey.undecodable == 0

    # the old case is outside a 300-message window, inside a wide one
    assert load_journey(kafka_bootstrap, old, [cases], codec, max_messages=300).events == ()
    wide = load_journey(kafka_bootstrap, old, [cases, missing], codec, max_messages=10_000)
    assert [e.aggregate_version for e in wide.events] == [1, 2]
