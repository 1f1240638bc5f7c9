"""``ensure_topics`` returns only once the metadata lists each topic with its partitions: a
consumer subscribing right after must find them at its group's join (an in-memory admin client
stands in for the cluster's answers)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from casestream.consumer import ensure_topics


def _done(error: KafkaError | None = None) -> Future:
    f: Future = Future()
    if error is None:
        f.set_result(None)
    else:
        f.set_exception(KafkaException(error))
    return f


def _topic(*leaders: int) -> SimpleNamespace:
    return SimpleNamespace(error=None, partitions={i: SimpleNamespace(leader=lead)
                                                   for i, lead in enumerate(leaders)})


class Admin:
    """Answers ``list_topics`` from the given snapshots in turn (the last one from then on)."""

    def __init__(self, *snapshots: dict[str, SimpleNamespace], exists: bool = False) -> None:
        self.snapshots = list(snapshots)
        self.lists = 0
        self.exists = exists
        self.asked: dict[str, int] = {}

    def create_topics(self, new, **_):  # noqa: ANN001, ANN003, ANN201
        error = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS) if self.exists else None
        return {t.topic: _done(error) for t in new}

    def list_topics(self, topic: str, timeout: float):  # noqa: ANN201
        """The topic's n-th answer is its entry in the n-th snapshot; ``lists``: rounds asked."""
        n = self.asked[topic] = self.asked.get(topic, 0) + 1
        self.lists = max(self.lists, n)
        snap = self.snapshots[min(n, len(self.snapshots)) - 1]
        return SimpleNamespace(topics={topic: snap[topic]} if topic in snap else {})


def test_waits_until_the_metadata_lists_every_topic_with_its_partitions() -> None:
    admin = Admin({}, {"a.dlq": _topic(0, 0)},
                  {"a.dlq": _topic(0, 0), "a.redrive": SimpleNamespace(error=None, partitions={})},
                  {"a.dlq": _topic(0, 0), "a.redrive": _topic(0, -1)})  # a partition without a leader is listed
    ensure_topics("unused:9092", ["a.dlq", "a.redrive"], admin=admin, timeout_s=5)
    assert admin.lists == 4


def test_a_topic_that_already_exists_is_waited_for_too() -> None:
    admin = Admin({}, {"t": _topic(1)}, exists=True)
    ensure_topics("unused:9092", ["t"], admin=admin, timeout_s=5)
    assert admin.lists == 2


def test_a_topic_never_listed_is_logged_after_the_timeout_and_start_up_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = Admin({"t": SimpleNamespace(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), partitions={})})
    ensure_topics("unused:9092", ["t"], admin=admin, timeout_s=0.3)
    assert admin.lists >= 2
    assert "topics t not listed in the cluster's metadata 0.3 s after their creation" in caplog.text


def test_a_failed_creation_is_raised() -> None:
    class Refusing(Admin):
        def create_topics(self, new, **_):  # noqa: ANN001, ANN003, ANN201
            return {t.topic: _done(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)) for t in new}

    with pytest.raises(KafkaException):
        ensure_topics("unused:9092", ["t"], admin=Refusing({}), timeout_s=1)
