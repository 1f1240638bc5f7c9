"""The stored decision of a case (one per case) and the reply event it answers with."""

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

    def reply_payload(self) -> dict[str, Any]:
        """The reply's payload, addressed to :attr:`saga_id`."""
        base: dict[str, Any] = {"case_id": self.case_id, "saga_id": self.saga_id}
        if self.verdict.outcome is Outcome.VIOLATION:
            return {**base, "violation_code": self.verdict.violation_code,
                    "penalty_cents": self.verdict.penalty_cents}
        if self.verdict.outcome is Outcome.FAILED:
            return {**base, "reason": self.verdict.reason}
        return base
