"""The exception tree of the audit service::

    AuditError
    └── TimelineNotFound     no event recorded for this case and tenant -> 404
"""

from __future__ import annotations


class AuditError(Exception):
    """Root of every error the audit service raises on purpose."""


class TimelineNotFound(AuditError):
    """No event of this case is recorded for this tenant (another tenant's case included)."""

    def __init__(self, case_id: str):
        super().__init__(f"no audit timeline for case {case_id}")
        self.case_id = case_id
