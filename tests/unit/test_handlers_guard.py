"""Unit tests of the aggregate-version guard rule and the consumer runtime's settings."""

from __future__ import annotations

import pytest

from casestream.consumer.settings import ConsumerSettings
from casestream.errors import ConfigError
from casestream.retry import RetryPolicy
from casestream.handlers.guard import FirstSeenPolicy, Verdict, decide

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


def test_settings_topic_names_and_validation() -> None:
    s = ConsumerSettings()
    assert s.dlq_topic_for("audit.journal") == "audit.journal.dlq"
    assert s.redrive_topic_for("audit.journal") == "audit.journal.redrive"
    assert ConsumerSettings(dlq_topic="x").dlq_topic_for("a") == "x"
    with pytest.raises(ConfigError):
        ConsumerSettings(batch_size=0)


def test_default_retry_is_bounded_and_an_unbounded_one_is_refused() -> None:
    retry = ConsumerSettings().retry
    assert (retry.max_attempts, retry.initial_delay_s, retry.max_delay_s, retry.jitter) == (
        5, 0.2, 30.0, 0.5)
    with pytest.raises(ConfigError):
        ConsumerSettings(retry=RetryPolicy())
    assert ConsumerSettings(retry=RetryPolicy(max_elapsed_s=60)).retry.max_attempts is None
