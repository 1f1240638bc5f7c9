"""Case domain: the case aggregate, its value objects, events and errors (stdlib only)."""

from services.case.domain.case import Case
from services.case.domain.errors import (
    CaseNotFound,
    CaseServiceError,
    CaseValidationError,
    InvalidTransition,
)
from services.case.domain.events import (
    CaseClosed,
    CaseEvent,
    CaseOpened,
    CaseReturned,
    CaseSubmitted,
)
from services.case.domain.values import CaseContent, CaseStatus, Outcome, Priority, Resolution

__all__ = [
    "Case",
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
