"""The decision rules (services/decision/domain/rules.py): boundaries, formula, failure hook."""

from __future__ import annotations

import pytest

from services.decision.domain import CaseFacts, Outcome, decide, penalty_cents


def facts(severity: int, evidence: int, title: str = "Leaky tank") -> CaseFacts:
    return CaseFacts(case_id="c1", severity=severity, evidence_count=evidence, title=title)


@pytest.mark.parametrize("severity,evidence,violation", [
    (1, 0, False), (1, 5, False), (2, 9, False),  # severity below 3: never
    (3, 0, False), (5, 0, False),  # no evidence: never
    (3, 1, True), (4, 2, True), (5, 10, True),
])
def test_violation_iff_severity_at_least_3_and_some_evidence(severity: int, evidence: int,
                                                               violation: bool) -> None:
    v = decide(facts(severity, evidence))
    assert (v.outcome is Outcome.VIOLATION) is violation
    if violation:
        assert v.violation_code == f"REG-{severity}"
        assert v.penalty_cents == severity * 50_000 * evidence
        assert v.reason is None
    else:
        assert v.outcome is Outcome.NO_VIOLATION
        assert (v.violation_code, v.penalty_cents, v.reason) == (None, None, None)


def test_penalty_formula_examples() -> None:
    assert penalty_cents(3, 1) == 150_000
    assert penalty_cents(4, 2) == 400_000
    assert penalty_cents(5, 0) == 250_000  # max(1, evidence): the formula is total


@pytest.mark.parametrize("title", ["[fail-decision]", "Dump site [fail-decision] north",
                                   "x[fail-decision]"])
def test_fail_marker_in_title_fails_the_decision(title: str) -> None:
    v = decide(facts(5, 3, title))
    assert v.outcome is Outcome.FAILED
    assert v.reason is not None and v.reason.startswith("decision engine rejected the case: ")
    assert (v.violation_code, v.penalty_cents) == (None, None)


def test_marker_is_case_sensitive_and_exact() -> None:
    assert decide(facts(5, 3, "[FAIL-DECISION]")).outcome is Outcome.VIOLATION
    assert decide(facts(5, 3, "fail-decision")).outcome is Outcome.VIOLATION


@pytest.mark.parametrize("severity,evidence", [(0, 1), (6, 1), (-1, 0), (3, -1)])
def test_out_of_range_facts_fail_instead_of_guessing(severity: int, evidence: int) -> None:
    v = decide(facts(severity, evidence))
    assert v.outcome is Outcome.FAILED
    assert v.reason is not None and ("severity" in v.reason or "evidence" in v.reason)


def test_rules_are_deterministic() -> None:
    assert decide(facts(4, 2)) == decide(facts(4, 2))
