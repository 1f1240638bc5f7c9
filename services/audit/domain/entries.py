"""Audit rules: which case an event belongs to, and its one-line human summary.

Rules:
- The case of an event is its ``aggregate_id`` when ``aggregate_type == "case"``, else its
  payload's ``case_id`` (saga, decision and notice events); None when neither applies
  (such events are journaled but belong to no timeline).
- A summary names what happened without personal data (no e-mail addresses): it is shown
  in timelines that outlive a reporter's consent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

CASE_AGGREGATE = "case"
SUMMARY_MAX = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalEntry:
    """One event as the audit journal records it (all envelope fields, plus derived ones).

    Attributes:
        case_id: the case the event belongs to (rule above), or None.
        summary: the one-line description (rule above), <= 300 characters.
        payload: the event payload as decoded (after upcasting), JSON-compatible values.
    """

    event_id: str
    event_type: str
    event_version: int
    source: str
    tenant_id: str
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    occurred_at: datetime
    published_at: datetime | None
    correlation_id: str
    causation_id: str | None
    traceparent: str | None
    actor_id: str
    payload: Mapping[str, Any]
    case_id: str | None
    summary: str


def case_id_of(aggregate_type: str, aggregate_id: str, payload: Mapping[str, Any]) -> str | None:
    """Return the case an event belongs to (module rule), or None."""
    if aggregate_type == CASE_AGGREGATE:
        return aggregate_id
    value = payload.get("case_id")
    return str(value) if value else None


def _money(cents: Any) -> str:
    if cents is None:
        return "no penalty"
    return f"penalty {int(cents) // 100}.{int(cents) % 100:02d}"


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "CaseOpened": lambda p: (f"Case opened: {p.get('title', '?')} "
                             f"(severity {p.get('severity')}, priority {p.get('priority', 'NORMAL')})"),
    "CaseSubmitted": lambda p: f"Case submitted by {p.get('submitted_by', '?')}",
    "CaseClosed": lambda p: f"Case closed: {p.get('outcome')}, {_money(p.get('penalty_cents'))}",
    "CaseReturned": lambda p: f"Case returned: {p.get('reason')}",
    "CaseRetitled": lambda p: f"Case retitled: {p.get('title')}",
    "CaseReprioritized": lambda p: f"Case reprioritized: {p.get('priority')}",
    "DecisionRequested": lambda p: (f"Decision requested (severity {p.get('severity')}, "
                                    f"{p.get('evidence_count')} evidence items)"),
    "NoticeRequested": lambda p: (f"Notice requested: {p.get('violation_code')}, "
                                  f"{_money(p.get('penalty_cents'))}"),
    "CaseCloseRequested": lambda p: (f"Close requested: {p.get('outcome')}, "
                                     f"{_money(p.get('penalty_cents'))}"),
    "CaseReturnRequested": lambda p: f"Return requested: {p.get('reason')}",
    "SagaCompleted": lambda p: f"Saga completed: {p.get('outcome')}",
    "SagaCompensated": lambda p: f"Saga compensated: {p.get('reason')}",
    "ViolationDetermined": lambda p: (f"Violation determined: {p.get('violation_code')}, "
                                      f"{_money(p.get('penalty_cents'))}"),
    "NoViolationFound": lambda p: "No violation found",
    "DecisionFailed": lambda p: f"Decision failed: {p.get('reason')}",
    "NoticeIssued": lambda p: (f"Notice issued (message {p.get('message_id')}, "
                               f"document sha256 {str(p.get('document_sha256') or 'none')[:12]})"),
    "PenaltyProposed": lambda p: (f"Penalty proposed: {_money(p.get('penalty_cents'))} "
                                  f"({p.get('reason') or 'no reason recorded'})"),
    "CaseAssigned": lambda p: (f"Case assigned to {p.get('officer_id')}"
                               + (f" (was {p['previous_officer_id']})"
                                  if p.get("previous_officer_id") else "")),
    "EvidenceRequested": lambda p: (f"Evidence requested by {p.get('due_at')}"
                                    + (f": {p['description']}" if p.get("description") else "")),
    "EvidenceSubmitted": lambda p: (f"Evidence submitted: {p.get('name')} "
                                    f"({p.get('size_bytes')} bytes, sha256 "
                                    f"{str(p.get('sha256'))[:12]})"),
    "ReviewStarted": lambda p: f"Review started by {p.get('officer_id') or 'an unassigned officer'}",
    "CaseWithdrawn": lambda p: f"Case withdrawn: {p.get('reason')}",
    "EvidenceOverdue": lambda p: (f"Evidence overdue since {p.get('due_at')}: reminder; "
                                  f"escalation at {p.get('escalate_at')}"),
    "CaseEscalated": lambda p: f"Case escalated to manual review: {p.get('reason')}",
    "AppealSubmitted": lambda p: (f"Appeal submitted against {p.get('outcome')}, "
                                  f"{_money(p.get('penalty_cents'))}: {p.get('reason')}"),
    "NoticeFailed": lambda p: f"Notice failed: {p.get('reason')}",
    "EvidenceReminderSent": lambda p: f"Evidence reminder sent (message {p.get('message_id')})",
}

KNOWN_EVENT_TYPES: frozenset[str] = frozenset(_SUMMARIES)
"""Every event type of the event contract, i.e. what the audit journal expects."""


def summarize(event_type: str, event_version: int, payload: Mapping[str, Any]) -> str:
    """Return the one-line summary of an event, at most 300 characters.

    Unknown event types get ``"<type> v<version>"`` (still journaled, never rejected).
    """
    describe = _SUMMARIES.get(event_type)
    text = describe(payload) if describe else f"{event_type} v{event_version}"
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"
