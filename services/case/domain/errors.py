"""The exception tree of the case service (root defined here, in the innermost layer).

Every error the case service raises on purpose derives from :class:`CaseServiceError`;
the HTTP adapter maps each leaf to one problem ``code`` and status at one boundary::

    CaseServiceError
    ├── CaseValidationError      a value breaks a domain rule (field + message)     -> 400
    ├── CaseNotFound             no such case for this tenant                      -> 404
    ├── InvalidTransition        the case's status does not allow the action       -> 409
    ├── EvidenceNotFound         no such evidence item on this case                -> 404
    └── (application layer, services.case.application.errors)
        ├── PreconditionFailed   If-Match version differs from the case's version    -> 412
        └── StorageUnavailable   the database cannot be reached in time               -> 503

Optimistic-locking failures found by the repository are the library's
:class:`casestream.errors.ConcurrencyError` (-> 409 ``concurrent_modification``);
Idempotency-Key conflicts are the library's ``casestream.http.IdempotencyConflict`` and
``RequestInFlight`` (-> 409 ``idempotency_conflict`` / ``request_in_flight``).
"""

from __future__ import annotations


class CaseServiceError(Exception):
    """Root of every error the case service raises on purpose."""


class CaseValidationError(CaseServiceError):
    """A value breaks a domain rule.

    Attributes:
        field: the name of the offending field as the client sent it (e.g. ``severity``).
        message: a readable explanation, safe to show to a client.
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class CaseNotFound(CaseServiceError):
    """No case with this id exists for this tenant (another tenant's case is "not found")."""

    def __init__(self, case_id: str):
        super().__init__(f"case {case_id} not found")
        self.case_id = case_id


class InvalidTransition(CaseServiceError):
    """The case's current status (or history) does not allow the requested action.

    Attributes:
        case_id: the case concerned.
        status: its current status (a ``CaseStatus`` value).
        action: the attempted action, e.g. ``submit``.
        rule: the rule that refuses it (``services.case.domain.workflow``), e.g.
            ``withdraw-before-decision: allowed from awaiting_evidence, open, under_review``.
    """

    def __init__(self, case_id: str, status: str, action: str, rule: str = ""):
        text = f"case {case_id} is {status}; cannot {action}"
        super().__init__(f"{text} (rule {rule})" if rule else text)
        self.case_id = case_id
        self.status = status
        self.action = action
        self.rule = rule


class EvidenceNotFound(CaseServiceError):
    """No evidence item with this id belongs to the case."""

    def __init__(self, case_id: str, evidence_id: str):
        super().__init__(f"evidence {evidence_id} not found on case {case_id}")
        self.case_id = case_id
        self.evidence_id = evidence_id
