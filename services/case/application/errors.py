"""Errors of the case use cases (leaves of the tree drawn in ``domain/errors.py``)."""

from __future__ import annotations

from services.case.domain.errors import CaseServiceError


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
