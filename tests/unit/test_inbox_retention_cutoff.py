"""The inbox purge cutoff rule (pure: broker state in, cutoff out)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from casestream.consumer.retention import PartitionState, inbox_cutoff

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DAY_MS = 86_400_000


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _p(**kw) -> PartitionState:
    base = dict(topic="t", partition=0, low=100, high=200, committed=200,
                first_ts_ms=_ms(NOW - timedelta(days=20)), committed_ts_ms=None)
    base.update(kw)
    return PartitionState(**base)


def cut(parts, retention_ms=10 * DAY_MS, min_age_s=7 * 86400.0, margin_s=600.0):
    return inbox_cutoff("c", parts, {"t": retention_ms}, now=NOW, min_age_s=min_age_s, margin_s=margin_s)


def test_every_bound_must_hold_so_the_oldest_bound_wins() -> None:
    assert "retention.ms=2592000000" in cut([_p()], retention_ms=30 * DAY_MS).reason


def test_the_oldest_record_still_in_the_log_bounds_the_cutoff() -> None:
    c = cut([_p()])
    assert c.at == NOW - timedelta(days=20) - timedelta(seconds=600)
    assert "oldest record of t[0]" in c.reason


def test_the_record_at_the_committed_offset_bounds_the_cutoff() -> None:
    at = NOW - timedelta(days=25)
    c = cut([_p(committed=150, committed_ts_ms=_ms(at), first_ts_ms=_ms(NOW - timedelta(days=35)))],
            retention_ms=30 * DAY_MS)
    assert c.at == NOW - timedelta(days=35, seconds=600)  # the older bound wins
    c = cut([_p(committed=150, committed_ts_ms=_ms(at), first_ts_ms=None, low=100)], retention_ms=20 * DAY_MS)
    assert c.at == at - timedelta(seconds=600) and "committed offset 150" in c.reason


def test_retention_and_the_dedup_window_bound_the_cutoff() -> None:
    assert "retention.ms" in cut([_p(first_ts_ms=_ms(NOW))], retention_ms=9 * DAY_MS).reason
    assert cut([_p(first_ts_ms=_ms(NOW))], retention_ms=DAY_MS, min_age_s=3 * 86400.0).at == \
        NOW - timedelta(days=3)


@pytest.mark.parametrize(("parts", "retention", "why"), [
    ([_p()], -1, "keeps its history forever"),
    ([_p(committed=None)], 10 * DAY_MS, "no committed offset on t[0]"),
    ([_p(committed=50)], 10 * DAY_MS, "below its low watermark 100"),
    ([], 10 * DAY_MS, "no partitions"),
])
def test_nothing_may_go_when_a_redelivery_could_still_need_anything(parts, retention, why) -> None:
    c = cut(parts, retention_ms=retention)
    assert c.at is None and why in c.reason


def test_an_empty_partition_does_not_hold_the_cutoff_back() -> None:
    c = cut([_p(), _p(partition=1, low=300, high=300, committed=None, first_ts_ms=None)])
    assert c.at == NOW - timedelta(days=20, seconds=600)
