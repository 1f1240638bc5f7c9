"""In-memory decision store and event sink, for unit tests (mirrors ``PgDecisionStore``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from casestream.errors import ConcurrencyError
from services.decision.domain.decision import Decision


@dataclass(slots=True)
class MemoryDecisionStore:
    """Dict-backed :class:`~services.decision.application.ports.DecisionStore`."""

    decisions: dict[str, Decision] = field(default_factory=dict)

    def get(self, case_id: str) -> Decision | None:
        return self.decisions.get(case_id)

    def insert(self, decision: Decision) -> bool:
        if decision.case_id in self.decisions:
            return False
        self.decisions[decision.case_id] = decision
        return True

    def readdress(self, case_id: str, *, saga_id: str, expected_version: int,
                  step: int = 1) -> None:
        current = self.decisions.get(case_id)
        if current is None or current.version != expected_version:
            raise ConcurrencyError("decision", case_id, expected_version,
                                   None if current is None else current.version)
        self.decisions[case_id] = replace(current, saga_id=saga_id, version=current.version + step)

