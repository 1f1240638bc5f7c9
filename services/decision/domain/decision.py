"""The stored decision of a case (one per case) and the reply events it answers with.

A violation answers with two facts, in this order: ``ViolationDetermined`` (the saga's
reply) and ``PenaltyProposed`` (the amount and the reason the rules give for it); the other
outcomes with one. Each announcement takes one aggregate version per event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.decision.domain.rules import Outcome, Verdict

REPLY_EVENT = {
    Outcome.VIOLATION: "ViolationDetermined",
    Outcome.NO_VIOLATION: "NoViolationFound",
    Outcome.FAILED: "DecisionFailed",
}
"""Event type answering each outcome of the decision aggregate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """A case's decision, as stored.

    Attributes:
        case_id: the case (unique: one decision per case; also the event aggregate id).
        tenant_id: the case's tenant.
        saga_id: the saga that asked last (replies go to it).
        verdict: what the rules said.
        rules_version: the rule set that decided.
        decided_at: when it was first decided.
        request_event_id: the DecisionRequested event that caused the first decision.
        version: aggregate version of the last reply event emitted for this case (>= 1).
    """

    case_id: str
    tenant_id: str
    saga_id: str
    verdict: Verdict
    rules_version: str
    decided_at: datetime
    request_event_id: str
    version: int = 1

    @property
    def reply_event_type(self) -> str:
        """``ViolationDetermined`` | ``NoViolationFound`` | ``DecisionFailed``."""
        return REPLY_EVENT[self.verdict.outcome]

    @property
    def events_per_announcement(self) -> int:
        """How many events one announcement of this decision emits (2 for a violation)."""
        return len(self.replies())

    def replies(self) -> list[tuple[str, dict[str, Any]]]:
        """``(event_type, payload)`` of every event of one announcement, in order."""
        out = [(self.reply_event_type, self.reply_payload())]
        if self.verdict.outcome is Outcome.VIOLATION:
            out.append(("PenaltyProposed", {
                "case_id": self.case_id, "saga_id": self.saga_id,
                "penalty_cents": self.verdict.penalty_cents,
                "violation_code": self.verdict.violation_code,
                "reason": self.verdict.penalty_reason or "", "rules_version": self.rules_version}))
        return out

    def reply_payload(self) -> dict[str, Any]:
        """The reply's payload, addressed to :attr:`saga_id`."""
        base: dict[str, Any] = {"case_id": self.case_id, "saga_id": self.saga_id}
        if self.verdict.outcome is Outcome.VIOLATION:
            return {**base, "violation_code": self.verdict.violation_code,
                    "penalty_cents": self.verdict.penalty_cents}
        if self.verdict.outcome is Outcome.FAILED:
            return {**base, "reason": self.verdict.reason}
        return base
