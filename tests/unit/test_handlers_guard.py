"""Unit tests of the aggregate-version guard rule and the retry policy of the consumer runtime."""

from __future__ import annotations

import random

import pytest

from casestream.consumer.settings import ConsumerSettings, RetryPolicy
from casestream.errors import ConfigError
from casestream.consumer.guard import FirstSeenPolicy, Verdict, decide

pytestmark = pytest.mark.unit

STRICT, BASELINE = FirstSeenPolicy.STRICT, FirstSeenPolicy.BASELINE


@pytest.mark.parametrize(
    ("last", "version", "policy", "verdict"),
    [
        (None, 1, STRICT, Verdict.APPLY),
        (None, 2, STRICT, Verdict.GAP),       # strict: the first event seen must be v1
        (None, 7, BASELINE, Verdict.APPLY),   # baseline: the first event seen sets the baseline
        (3, 4, STRICT, Verdict.APPLY),
        (3, 3, STRICT, Verdict.STALE),        # duplicate version
        (3, 1, BASELINE, Verdict.STALE),      # out-of-date copy
        (3, 5, STRICT, Verdict.GAP),
        (3, 5, BASELINE, Verdict.GAP),        # baseline only concerns the first event
        (0, 1, STRICT, Verdict.APPLY),        # row created by a hold before v1 arrived
    ],
)
def test_guard_verdicts(last: int | None, version: int, policy: FirstSeenPolicy,
                        verdict: Verdict) -> None:
    assert decide(last, version, policy) is verdict


def test_guard_rejects_versions_below_one() -> None:
    with pytest.raises(ValueError):
        decide(None, 0, STRICT)


def test_retry_delays_grow_exponentially_within_jitter_and_cap() -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.1, max_s=1.0, jitter=0.5)
    rng = random.Random(7)
    for n, full in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        for _ in range(50):
            d = policy.delay(n, rng)
            assert full * 0.5 - 1e-9 <= d <= full + 1e-9
    assert not policy.exhausted(4) and policy.exhausted(5)


def test_retry_without_jitter_is_deterministic() -> None:
    policy = RetryPolicy(base_s=0.5, max_s=10, jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("kwargs", [dict(max_attempts=0), dict(base_s=2, max_s=1),
                                    dict(jitter=1.5)])
def test_retry_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_settings_topic_names_and_validation() -> None:
    s = ConsumerSettings()
    assert s.dlq_topic_for("audit.journal") == "audit.journal.dlq"
    assert s.redrive_topic_for("audit.journal") == "audit.journal.redrive"
    assert ConsumerSettings(dlq_topic="x").dlq_topic_for("a") == "x"
    with pytest.raises(ConfigError):
        ConsumerSettings(batch_size=0)
