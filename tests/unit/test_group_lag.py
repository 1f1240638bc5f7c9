"""Consumer-group lag rule (casestream.kafka.lag): a partition with no commit counts from the
first retained offset, as every lag reader (status, console data, the consumer's gauge) does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from casestream.kafka.lag import behind, read_group_partitions


def test_no_commit_counts_the_whole_retained_log() -> None:
    assert behind(None, 0, 2) == 2
    assert behind(-1001, 5, 9) == 4  # librdkafka's OFFSET_INVALID
    assert behind(7, 5, 9) == 2
    assert behind(3, 5, 9) == 4  # a commit below the low watermark: starts at the low one
    assert behind(9, 5, 9) == 0


class FakeClient:
    """Two partitions of ``t``: one committed at 1, one never committed; ``gone`` missing."""

    def list_topics(self, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions={0: None, 1: None})})

    def committed(self, tps: list, timeout: float) -> list:
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition,
                                offset=1 if tp.partition == 0 else -1001) for tp in tps]

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        return (0, 3)


def test_every_partition_of_the_topics_is_read_and_a_fresh_one_counts_from_its_start() -> None:
    parts = read_group_partitions(FakeClient(), ["t", "gone"])
    assert [(p.topic, p.partition, p.committed, p.lag) for p in parts] == [
        ("t", 0, 1, 2), ("t", 1, None, 3)]
