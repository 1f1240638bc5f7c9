"""The documented failure hooks the saga's integration tests rely on (pure parts)."""

from __future__ import annotations

import pytest

from services.case.adapters.saga_requests import FAIL_COMPENSATION
from services.decision.domain.rules import CaseFacts, Outcome, decide


def test_compensation_marker_is_carried_into_the_decision_failure_reason() -> None:
    verdict = decide(CaseFacts(case_id="c-1", severity=4, evidence_count=1,
                               title="x [fail-decision] [fail-compensation:2]"))
    assert verdict.outcome is Outcome.FAILED
    assert verdict.reason is not None and verdict.reason.endswith(" [fail-compensation:2]")


def test_plain_decision_failure_reason_is_unchanged() -> None:
    verdict = decide(CaseFacts(case_id="c-1", severity=4, evidence_count=1, title="[fail-decision]"))
    assert verdict.reason == ("decision engine rejected the case: title contains the test "
                              "marker [fail-decision]")


@pytest.mark.parametrize("reason,times", [("x [fail-compensation]", None),
                                          ("x [fail-compensation:2] y", "2")])
def test_case_service_compensation_hook_syntax(reason: str, times: str | None) -> None:
    match = FAIL_COMPENSATION.search(reason)
    assert match is not None and match.group(1) == times
    assert FAIL_COMPENSATION.search("decision failed") is None

