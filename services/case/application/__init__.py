"""Case application layer: use cases, commands/views, ports, event mapping; the idempotency
types are the platform's (``casestream.http``), re-exported for the adapters."""

from services.case.application.commands import (
    AppealCase,
    CorrectNotice,
    AssignOfficer,
    CaseQuery,
    CaseView,
    CaseWrite,
    CloseCase,
    EvidenceView,
    OpenCase,
    RequestEvidence,
    ReturnCase,
    StartReview,
    SubmitCase,
    SubmitEvidence,
    WithdrawCase,
)
from casestream.http import (
    IdempotencyConflict,
    IdempotencyRecord,
    IdempotencyScope,
    IdempotentRequest,
    RequestInFlight,
    StoredResponse,
)
from services.case.application.errors import PreconditionFailed, StorageUnavailable
from services.case.application.integration import Causation
from services.case.application.service import CaseService

__all__ = [
    "AppealCase",
    "CorrectNotice",
    "AssignOfficer",
    "CaseQuery",
    "CaseWrite",
    "EvidenceView",
    "RequestEvidence",
    "StartReview",
    "SubmitEvidence",
    "WithdrawCase",
    "CaseService",
    "CaseView",
    "Causation",
    "CloseCase",
    "IdempotencyConflict",
    "IdempotencyRecord",
    "IdempotencyScope",
    "IdempotentRequest",
    "OpenCase",
    "PreconditionFailed",
    "RequestInFlight",
    "ReturnCase",
    "StorageUnavailable",
    "StoredResponse",
    "SubmitCase",
]
