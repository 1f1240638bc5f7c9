"""Case application layer: use cases, commands/views, ports, idempotency, event mapping."""

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
from services.case.application.errors import (
    IdempotencyConflict,
    PreconditionFailed,
    RequestInFlight,
    StorageUnavailable,
)
from services.case.application.idempotency import (
    IdempotencyRecord,
    IdempotencyScope,
    IdempotentRequest,
    StoredResponse,
)
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
