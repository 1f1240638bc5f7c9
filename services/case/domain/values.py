"""Value objects of a case: status, priority, outcome, and the validated case content.

Rules (the CaseOpened v3 / CaseSubmitted v1 schemas):
- title: 1..200 characters after trimming.
- summary: 1..500 characters after trimming (the CaseOpened v3 contract caps it at 500).
- severity: integer 1..5.
- evidence_count: integer 0..2**31-1 (an Avro ``int``).
- reporter_email: ``local@domain.tld`` shape, at most 254 characters (RFC 5321 path limit).
- priority: LOW | NORMAL | HIGH, default NORMAL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from services.case.domain.errors import CaseValidationError

TITLE_MAX = 200
SUMMARY_MAX = 500
SEVERITY_MIN, SEVERITY_MAX = 1, 5
AVRO_INT_MAX = 2**31 - 1
EMAIL_MAX = 254
REASON_MAX = 1000
NOTE_MAX = 1000
OFFICER_MAX = 128
DESCRIPTION_MAX = 1000
EVIDENCE_NAME_MAX = 200
MEDIA_TYPE_MAX = 127
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class CaseStatus(StrEnum):
    """Lifecycle (``services.case.domain.workflow`` draws every transition): OPEN ->
    [AWAITING_EVIDENCE | UNDER_REVIEW] -> SUBMITTED -> CLOSED | RETURNED; an appeal moves
    CLOSED -> APPEALED -> CLOSED; WITHDRAWN ends a case before its decision; overdue evidence
    escalates AWAITING_EVIDENCE -> MANUAL_REVIEW."""

    OPEN = "open"
    AWAITING_EVIDENCE = "awaiting_evidence"
    UNDER_REVIEW = "under_review"
    SUBMITTED = "submitted"
    CLOSED = "closed"
    RETURNED = "returned"
    WITHDRAWN = "withdrawn"
    APPEALED = "appealed"
    MANUAL_REVIEW = "manual_review"

    @property
    def is_final(self) -> bool:
        """True for CLOSED, RETURNED and WITHDRAWN (a closed case may still be appealed once)."""
        return self in (CaseStatus.CLOSED, CaseStatus.RETURNED, CaseStatus.WITHDRAWN)


class Priority(StrEnum):
    """Avro enum ``casestream.case.Priority`` (CaseOpened v2+)."""

    LOW = "LOW"
    NORMAL = "NORMAL"
    HIGH = "HIGH"


class Outcome(StrEnum):
    """The decision a closed case carries (CaseClosed v1 ``outcome``)."""

    VIOLATION = "violation"
    NO_VIOLATION = "no_violation"


def _text(field: str, value: str, max_len: int) -> str:
    if not isinstance(value, str):
        raise CaseValidationError(field, "must be a string")
    trimmed = value.strip()
    if not trimmed:
        raise CaseValidationError(field, "must not be empty")
    if len(trimmed) > max_len:
        raise CaseValidationError(field, f"must be at most {max_len} characters")
    return trimmed


def _int(field: str, value: int, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CaseValidationError(field, "must be an integer")
    if not low <= value <= high:
        raise CaseValidationError(field, f"must be between {low} and {high}")
    return value


def check_email(field: str, value: str) -> str:
    """Return ``value`` trimmed if it looks like ``local@domain.tld``.

    Raises:
        CaseValidationError: naming ``field`` otherwise.
    """
    text = _text(field, value, EMAIL_MAX)
    if not _EMAIL.fullmatch(text):
        raise CaseValidationError(field, "must be an e-mail address like name@example.org")
    return text


def priority_of(value: str | Priority) -> Priority:
    """Return the :class:`Priority` named by ``value``.

    Raises:
        CaseValidationError: ``priority`` is not one of LOW, NORMAL, HIGH.
    """
    try:
        return Priority(value)
    except ValueError:
        raise CaseValidationError("priority", "must be one of LOW, NORMAL, HIGH") from None


def check_reason(value: str) -> str:
    """Return a return-reason trimmed and non-empty, at most 1000 characters."""
    return _text("reason", value, REASON_MAX)


def check_text(field: str, value: str, max_len: int) -> str:
    """Return ``value`` trimmed, non-empty and at most ``max_len`` characters.

    Raises:
        CaseValidationError: naming ``field`` otherwise.
    """
    return _text(field, value, max_len)


def check_note(value: str | None) -> str | None:
    """Return a submission note trimmed (None or blank -> None), at most 1000 characters."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _text("note", value, NOTE_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseContent:
    """What a reporter says about a case; validated and normalised on construction.

    Raises:
        CaseValidationError: naming the first field that breaks a rule (module docstring).
    """

    title: str
    summary: str
    severity: int
    evidence_count: int
    reporter_email: str
    priority: Priority = Priority.NORMAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "title", _text("title", self.title, TITLE_MAX))
        object.__setattr__(self, "summary", _text("summary", self.summary, SUMMARY_MAX))
        _int("severity", self.severity, SEVERITY_MIN, SEVERITY_MAX)
        _int("evidence_count", self.evidence_count, 0, AVRO_INT_MAX)
        object.__setattr__(self, "reporter_email", check_email("reporter_email", self.reporter_email))
        object.__setattr__(self, "priority", priority_of(self.priority))


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """How a submitted case ended: closed with an outcome, or returned with a reason.

    Rules: a ``violation`` carries ``penalty_cents`` >= 0; ``no_violation`` carries none
    (0 is accepted and normalised to None). A return carries a reason and no outcome.
    """

    outcome: Outcome | None = None
    penalty_cents: int | None = None
    reason: str | None = None

    @classmethod
    def closed(cls, outcome: str, penalty_cents: int | None) -> Resolution:
        """Validate a close resolution. Raises CaseValidationError on a bad combination."""
        try:
            kind = Outcome(outcome)
        except ValueError:
            raise CaseValidationError("outcome", "must be violation or no_violation") from None
        if kind is Outcome.VIOLATION:
            if penalty_cents is None:
                raise CaseValidationError("penalty_cents", "a violation needs a penalty")
            _int("penalty_cents", penalty_cents, 0, 2**63 - 1)
            return cls(outcome=kind, penalty_cents=penalty_cents)
        if penalty_cents not in (None, 0):
            raise CaseValidationError("penalty_cents", "no_violation carries no penalty")
        return cls(outcome=kind, penalty_cents=None)

    @classmethod
    def returned(cls, reason: str) -> Resolution:
        """Validate a return resolution (reason non-empty, <= 1000 characters)."""
        return cls(reason=check_reason(reason))
