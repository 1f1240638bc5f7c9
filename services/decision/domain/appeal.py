"""The appeal rule: upheld or rejected, a pure function of the appeal (stdlib only).

Rule ``appeal-new-grounds`` (rules :data:`~services.decision.domain.rules.RULES_VERSION`):
an appeal is **upheld** when its grounds name new material the first decision could not
weigh — one of the words :data:`UPHOLDING_WORDS` (``evidence``, ``licence``, ``license``,
``permit``; whole words, any case). The penalty is then withdrawn (corrected penalty 0).
Any other appeal is **rejected** and the first decision stands. The rule is deterministic,
so a repeated request gets the same answer and the demo drives both outcomes by the
wording of the grounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

APPEAL_RULE = "appeal-new-grounds"
UPHOLDING_WORDS = ("evidence", "licence", "license", "permit")
_UPHOLDING = re.compile(r"\b(" + "|".join(UPHOLDING_WORDS) + r")\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class AppealVerdict:
    """The ruling on one appeal.

    Attributes:
        upheld: True -> ``AppealUpheld``, False -> ``AppealRejected``.
        reason: the rule's explanation (goes into the event and the party's mail).
        penalty_cents: the corrected penalty when upheld (0: withdrawn), else None.
    """

    upheld: bool
    reason: str
    penalty_cents: int | None


def rule_on_appeal(grounds: str) -> AppealVerdict:
    """Apply rule ``appeal-new-grounds`` (module docstring) to the party's ``grounds``."""
    found = _UPHOLDING.search(grounds)
    if found:
        return AppealVerdict(upheld=True, penalty_cents=0, reason=(
            f"rule {APPEAL_RULE}: the grounds name new {found.group(1).lower()}; "
            "the penalty is withdrawn"))
    return AppealVerdict(upheld=False, penalty_cents=None, reason=(
        f"rule {APPEAL_RULE}: the grounds name no new evidence, licence or permit; "
        "the decision stands"))
