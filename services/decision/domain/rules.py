"""The decision rules (pure, deterministic; rule version :data:`RULES_VERSION`).

Rules, applied in this order to a case's facts (severity 1..5, evidence_count >= 0, title):

1. **Test hook** — a title containing :data:`FAIL_MARKER` (``"[fail-decision]"``) is
   rejected: ``DecisionFailed`` with reason ``"decision engine rejected the case: ..."``.
   This is the documented way for tests and the demo to make a decision fail (the saga
   then compensates by returning the case). A ``[fail-compensation]`` or
   ``[fail-compensation:N]`` marker in the title is copied into the reason (see
   :data:`DOWNSTREAM_MARKER`).
2. **Facts out of range** — severity outside 1..5 or a negative evidence count is
   rejected the same way (the engine refuses to guess).
3. **Violation** iff ``severity >= 3`` and ``evidence_count >= 1``; then
   ``violation_code = "REG-<severity>"`` and
   ``penalty_cents = severity * 50_000 * max(1, evidence_count)``
   (EUR 500.00 per severity point and piece of evidence; the ``max`` keeps the formula total
   for callers that price a case without evidence); the penalty is proposed with its reason
   (:func:`penalty_reason`: the formula with the case's numbers).
4. Otherwise **no violation**.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

RULES_VERSION = "2025-01"
"""Version of this rule set, stored with every decision."""

FAIL_MARKER = "[fail-decision]"
"""A title containing this marker makes the decision fail (documented test hook)."""

DOWNSTREAM_MARKER = re.compile(r"\[fail-compensation(?::\d+)?\]")
"""Test markers of later steps copied from the title into the failure reason, so the
saga's compensation request carries them (the case service's ``[fail-compensation(:N)]``
hook refuses the case return)."""

PENALTY_PER_POINT_CENTS = 50_000
"""Penalty per severity point and piece of evidence, in cents."""

MIN_VIOLATION_SEVERITY = 3
MIN_VIOLATION_EVIDENCE = 1
FAILURE_PREFIX = "decision engine rejected the case: "


class Outcome(enum.Enum):
    """The three answers of the decision service."""

    VIOLATION = "violation"
    NO_VIOLATION = "no_violation"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseFacts:
    """What the rules look at (from ``DecisionRequested``).

    Attributes:
        case_id: the case.
        severity: 1..5 (5 = most severe).
        evidence_count: pieces of evidence, >= 0.
        title: the case title ("" if the request carries none).
    """

    case_id: str
    severity: int
    evidence_count: int
    title: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The rules' answer.

    Attributes:
        outcome: see :class:`Outcome`.
        violation_code: ``"REG-<severity>"`` for a violation, else None.
        penalty_cents: the penalty in cents for a violation, else None.
        reason: why the decision failed (FAILED only), else None.
        penalty_reason: how the penalty was computed (VIOLATION only), else None.
    """

    outcome: Outcome
    violation_code: str | None = None
    penalty_cents: int | None = None
    reason: str | None = None
    penalty_reason: str | None = None


def penalty_cents(severity: int, evidence_count: int) -> int:
    """``severity * 50_000 * max(1, evidence_count)`` cents (rule 3)."""
    return severity * PENALTY_PER_POINT_CENTS * max(1, evidence_count)


def penalty_reason(severity: int, evidence_count: int) -> str:
    """Why the penalty is what it is, e.g. ``severity 4 x 2 evidence item(s) x EUR 500.00
    (rules 2025-01, rule 3)``."""
    return (f"severity {severity} x {max(1, evidence_count)} evidence item(s) x EUR "
            f"{PENALTY_PER_POINT_CENTS // 100:,}.{PENALTY_PER_POINT_CENTS % 100:02d} "
            f"(rules {RULES_VERSION}, rule 3)")


def decide(facts: CaseFacts) -> Verdict:
    """Apply the rules of this module to ``facts``; never raises."""
    if FAIL_MARKER in facts.title:
        carried = "".join(f" {m}" for m in DOWNSTREAM_MARKER.findall(facts.title))
        return Verdict(outcome=Outcome.FAILED,
                       reason=FAILURE_PREFIX + f"title contains the test marker {FAIL_MARKER}"
                       + carried)
    if not 1 <= facts.severity <= 5:
        return Verdict(outcome=Outcome.FAILED,
                       reason=FAILURE_PREFIX + f"severity {facts.severity} is outside 1..5")
    if facts.evidence_count < 0:
        return Verdict(outcome=Outcome.FAILED,
                       reason=FAILURE_PREFIX + f"evidence count {facts.evidence_count} is negative")
    if facts.severity >= MIN_VIOLATION_SEVERITY and facts.evidence_count >= MIN_VIOLATION_EVIDENCE:
        return Verdict(outcome=Outcome.VIOLATION, violation_code=f"REG-{facts.severity}",
                       penalty_cents=penalty_cents(facts.severity, facts.evidence_count),
                       penalty_reason=penalty_reason(facts.severity, facts.evidence_count))
    return Verdict(outcome=Outcome.NO_VIOLATION)
