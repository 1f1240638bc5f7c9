"""Errors of the case use cases (leaves of the tree drawn in ``domain/errors.py``)."""

from __future__ import annotations

from services.case.domain.errors import CaseServiceError


class IdempotencyConflict(CaseServiceError):
    """The Idempotency-Key was already used, in this scope, for a different request."""

    def __init__(self, key_hash: str):
        super().__init__(f"idempotency key {key_hash[:12]}… was used for a different request")
        self.key_hash = key_hash


class RequestInFlight(CaseServiceError):
    """A request with the same Idempotency-Key is still being processed."""

    def __init__(self, key_hash: str):
        super().__init__(f"a request with idempotency key {key_hash[:12]}… is in flight")
        self.key_hash = key_hash


class PreconditionFailed(CaseServiceError):
    """The client's expected version (If-Match) is not the case's current version."""

    def __init__(self, case_id: str, expected: int, actual: int):
        super().__init__(f"case {case_id}: expected version {expected}, current is {actual}")
        self.case_id = case_id
        self.expected = expected
        self.actual = actual


class StorageUnavailable(CaseServiceError):
    """The store could not be reached in time (pool timeout, connection lost); retry later.

    Raised by storage adapters, translated from their driver's errors.
    """
