"""Pure saga domain (stdlib only): definitions as data, the engine interpreting them, and
the case-review, appeal and notice-correction sagas.

Public names are re-exported here.
"""

from services.saga.domain.appeal import APPEAL, appeal_saga
from services.saga.domain.case_review import CASE_REVIEW, case_review_saga
from services.saga.domain.correction import NOTICE_CORRECTION, notice_correction_saga
from services.saga.domain.definition import (
    DEADLINE, RESOLVE, Request, RetryPolicy, SagaDefinition, State, StateKind, Step, StepKind,
    Transition, fields,
)
from services.saga.domain.engine import (
    Disposition,
    Emission,
    HistoryEntry,
    Outcome,
    SagaInstance,
    apply_event,
    RECONCILE,
    fire_deadline,
    reissue,
    resolve,
    start_saga,
)
from services.saga.domain.errors import DefinitionError, SagaError, UnknownTrigger

__all__ = [
    "APPEAL", "appeal_saga", "CASE_REVIEW", "NOTICE_CORRECTION", "notice_correction_saga", "DEADLINE", "RESOLVE", "DefinitionError", "Disposition", "Emission",
    "HistoryEntry", "Outcome", "Request", "RetryPolicy", "SagaDefinition", "SagaError",
    "SagaInstance", "State", "StateKind", "Step", "StepKind", "Transition", "UnknownTrigger",
    "RECONCILE", "apply_event", "reissue", "case_review_saga", "fields", "fire_deadline", "resolve", "start_saga",
]
