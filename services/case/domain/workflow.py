"""The regulator's workflow: which action each case status allows, and the rule that says so.

Statuses and actions (``TRANSITIONS``; an action missing for a status is refused with
:class:`~services.case.domain.errors.InvalidTransition` naming the rule)::

    open ──request_evidence──▶ awaiting_evidence ──submit_evidence──▶ under_review
    open ──start_review──────▶ under_review ──request_evidence──▶ awaiting_evidence
    open | under_review ──submit──▶ submitted ──close──▶ closed ──appeal──▶ appealed
                                              └─return─▶ returned (final)
    appealed ──close──▶ closed (the appeal's decision; a closed case is appealed once)
    closed ──correct_notice (supervisor; a closed violation)──▶ closed (a correction notice)
    open | awaiting_evidence | under_review | manual_review ──withdraw──▶ withdrawn (final)
    awaiting_evidence ──mark_overdue (due date passed)──▶ awaiting_evidence (reminder)
    awaiting_evidence ──escalate (grace after the reminder passed)──▶ manual_review
    manual_review ──submit_evidence──▶ under_review;  manual_review ──submit──▶ submitted
    assign: any status but closed, returned, withdrawn; the status does not change

Rules of values (``services.case.domain.values`` holds the limits): an evidence request's due
date carries a time zone (one already passed makes the evidence overdue at once); an evidence item is 1..:data:`EVIDENCE_MAX_BYTES` bytes; an appeal
is filed within :data:`APPEAL_WINDOW` of the closing decision, against a ``violation``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from services.case.domain.values import CaseStatus

EVIDENCE_MAX_BYTES = 32 * 1024
"""Largest evidence item stored with the case (bytes); the JSON body carries it base64."""

APPEAL_WINDOW = timedelta(days=30)
"""How long after the closing decision an appeal is accepted."""

EVIDENCE_GRACE = timedelta(days=7)
"""Default time between the overdue reminder and the escalation to manual review (the case
service's ``CASESTREAM_CASE_EVIDENCE_GRACE_S``)."""


class Action(StrEnum):
    """What a client or the saga asks of a case."""

    ASSIGN = "assign"
    REQUEST_EVIDENCE = "request_evidence"
    SUBMIT_EVIDENCE = "submit_evidence"
    START_REVIEW = "start_review"
    SUBMIT = "submit"
    WITHDRAW = "withdraw"
    CLOSE = "close"
    RETURN = "return"
    APPEAL = "appeal"
    CORRECT_NOTICE = "correct_notice"
    MARK_OVERDUE = "mark_overdue"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Rule:
    """One action's rule: the statuses it is allowed from and the status it leads to.

    Attributes:
        name: stable rule name, sent in the 409 problem (e.g. ``evidence-after-request``).
        allowed: statuses the action is allowed from.
        target: the status after the action (None: unchanged).
    """

    name: str
    allowed: frozenset[CaseStatus]
    target: CaseStatus | None

    def describe(self) -> str:
        """``<name>: allowed from a, b`` (the text a refused client reads)."""
        return f"{self.name}: allowed from {', '.join(sorted(s.value for s in self.allowed))}"


S = CaseStatus
TRANSITIONS: dict[Action, Rule] = {
    Action.ASSIGN: Rule("assign-while-active", frozenset(
        {S.OPEN, S.AWAITING_EVIDENCE, S.UNDER_REVIEW, S.SUBMITTED, S.APPEALED,
         S.MANUAL_REVIEW}), None),
    Action.REQUEST_EVIDENCE: Rule("evidence-request-before-decision",
                                  frozenset({S.OPEN, S.UNDER_REVIEW}), S.AWAITING_EVIDENCE),
    Action.SUBMIT_EVIDENCE: Rule("evidence-after-request",
                                 frozenset({S.AWAITING_EVIDENCE, S.MANUAL_REVIEW}), S.UNDER_REVIEW),
    Action.START_REVIEW: Rule("review-from-open", frozenset({S.OPEN}), S.UNDER_REVIEW),
    Action.SUBMIT: Rule("submit-after-intake-or-review",
                        frozenset({S.OPEN, S.UNDER_REVIEW, S.MANUAL_REVIEW}), S.SUBMITTED),
    Action.WITHDRAW: Rule("withdraw-before-decision",
                          frozenset({S.OPEN, S.AWAITING_EVIDENCE, S.UNDER_REVIEW,
                                     S.MANUAL_REVIEW}), S.WITHDRAWN),
    Action.CLOSE: Rule("close-after-decision-or-appeal", frozenset({S.SUBMITTED, S.APPEALED}),
                       S.CLOSED),
    Action.RETURN: Rule("return-submitted-only", frozenset({S.SUBMITTED}), S.RETURNED),
    Action.APPEAL: Rule("appeal-closed-once", frozenset({S.CLOSED}), S.APPEALED),
    Action.CORRECT_NOTICE: Rule("correction-after-notice", frozenset({S.CLOSED}), None),
    Action.MARK_OVERDUE: Rule("overdue-while-awaiting-evidence", frozenset({S.AWAITING_EVIDENCE}),
                              None),
    Action.ESCALATE: Rule("escalate-overdue-evidence", frozenset({S.AWAITING_EVIDENCE}),
                          S.MANUAL_REVIEW),
}
"""Every action's rule (module docstring draws them)."""


def rule_for(action: Action) -> Rule:
    """The rule of ``action``."""
    return TRANSITIONS[action]
