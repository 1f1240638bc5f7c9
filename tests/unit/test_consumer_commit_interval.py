"""Offset commits of the consumer loop at most every ``commit_interval_s``, without Kafka
(the clock is backdated instead of waited for)."""

from __future__ import annotations

import math

import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers.registry import HandlerRegistry

CONF = {"bootstrap.servers": "127.0.0.1:1"}


class _FakeConsumer:
    """Records ``commit`` calls as ``(offsets, asynchronous)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, int, int]], bool]] = []

    def commit(self, *, offsets: list, asynchronous: bool) -> list | None:
        self.calls.append(([(tp.topic, tp.partition, tp.offset) for tp in offsets], asynchronous))
        return None if asynchronous else offsets


def _runtime(interval_s: float) -> tuple[ConsumerRuntime, _FakeConsumer]:
    rt = ConsumerRuntime("unit.commits", ["t"], HandlerRegistry(), object(), object(), CONF,
                         ConsumerSettings(commit_interval_s=interval_s))
    rt._consumer = fake = _FakeConsumer()
    return rt, fake


def _answered(rt: ConsumerRuntime) -> None:
    from confluent_kafka import TopicPartition

    rt._on_commit(None, [TopicPartition(t, p, o) for (t, p), o in rt._pending.items()])


def test_answered_commits_wait_for_the_interval_then_carry_every_pending_offset() -> None:
    rt, fake = _runtime(1.0)
    rt._pending = {("t", 0): 5}
    rt._commit_pending()
    _answered(rt)
    rt._pending = {("t", 0): 8, ("t", 1): 3}
    rt._commit_pending()  # answered, but sent less than a second ago
    assert fake.calls == [([("t", 0, 5)], True)]
    rt._commit_last -= 1.0
    rt._commit_pending()
    assert fake.calls[-1] == ([("t", 0, 8), ("t", 1, 3)], True)


def test_interval_zero_commits_after_every_answered_batch() -> None:
    rt, fake = _runtime(0.0)
    for off in (5, 6, 7):
        rt._pending = {("t", 0): off}
        rt._commit_pending()
        _answered(rt)
    assert [c[0] for c in fake.calls] == [[("t", 0, 5)], [("t", 0, 6)], [("t", 0, 7)]]


def test_a_revoke_or_shutdown_commits_at_once_within_the_interval() -> None:
    rt, fake = _runtime(30.0)
    rt._pending = {("t", 0): 5}
    rt._commit_pending()
    _answered(rt)
    rt._pending = {("t", 0): 9}
    rt._commit_pending(wait=True)
    assert fake.calls == [([("t", 0, 5)], True), ([("t", 0, 9)], False)]
    assert rt._pending == {}


def test_a_failed_commit_is_sent_again_without_waiting_for_the_interval() -> None:
    from confluent_kafka import KafkaError

    rt, fake = _runtime(30.0)
    rt._pending = {("t", 0): 5}
    rt._commit_pending()
    rt._on_commit(KafkaError(KafkaError._WAIT_COORD), [])
    rt._commit_pending()
    assert fake.calls == [([("t", 0, 5)], True), ([("t", 0, 5)], True)]


@pytest.mark.parametrize("bad", [-0.1, math.inf, math.nan])
def test_commit_interval_must_be_finite_and_not_negative(bad: float) -> None:
    with pytest.raises(ConfigError, match="commit_interval_s"):
        ConsumerSettings(commit_interval_s=bad)
