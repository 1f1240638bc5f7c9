"""Case application layer: use cases, commands/views, ports, idempotency, event mapping."""

from services.case.application.commands import CaseView, CloseCase, OpenCase, ReturnCase, SubmitCase
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
