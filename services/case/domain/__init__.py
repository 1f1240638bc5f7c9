"""Case domain: the case aggregate, its value objects, events and errors (stdlib only)."""

from services.case.domain.case import Case
from services.case.domain.errors import (
    CaseNotFound,
    EvidenceNotFound,
    CaseServiceError,
    CaseValidationError,
    InvalidTransition,
)
from services.case.domain.events import (
    AppealSubmitted,
    CaseAssigned,
    CaseClosed,
    CaseEscalated,
    CaseEvent,
    CaseOpened,
    CaseReturned,
    CaseSubmitted,
    CaseWithdrawn,
    EvidenceOverdue,
    NoticeCorrectionOrdered,
    EvidenceRequested,
    EvidenceSubmitted,
    ReviewStarted,
)
from services.case.domain.workflow import (
    APPEAL_WINDOW,
    EVIDENCE_GRACE,
    EVIDENCE_MAX_BYTES,
    TRANSITIONS,
    Action,
    Rule,
)
from services.case.domain.values import CaseContent, CaseStatus, Outcome, Priority, Resolution

__all__ = [
    "APPEAL_WINDOW",
    "EVIDENCE_GRACE",
    "EVIDENCE_MAX_BYTES",
    "CaseEscalated",
    "EvidenceOverdue",
    "NoticeCorrectionOrdered",
    "TRANSITIONS",
    "Action",
    "AppealSubmitted",
    "Case",
    "CaseAssigned",
    "CaseWithdrawn",
    "EvidenceNotFound",
    "EvidenceRequested",
    "EvidenceSubmitted",
    "ReviewStarted",
    "Rule",
    "CaseClosed",
    "CaseContent",
    "CaseEvent",
    "CaseNotFound",
    "CaseOpened",
    "CaseReturned",
    "CaseServiceError",
    "CaseStatus",
    "CaseSubmitted",
    "CaseValidationError",
    "InvalidTransition",
    "Outcome",
    "Priority",
    "Resolution",
]
