"""Pure decision domain (stdlib only): the rules and the decision record."""

from services.decision.domain.appeal import APPEAL_RULE, AppealVerdict, rule_on_appeal
from services.decision.domain.decision import REPLY_EVENT, Decision
from services.decision.domain.rules import (
    FAIL_MARKER,
    RULES_VERSION,
    CaseFacts,
    Outcome,
    Verdict,
    decide,
    penalty_cents,
)

__all__ = ["APPEAL_RULE", "AppealVerdict", "rule_on_appeal", "REPLY_EVENT", "Decision", "FAIL_MARKER", "RULES_VERSION", "CaseFacts", "Outcome", "Verdict", "decide",
           "penalty_cents"]
