"""Map case domain events to the integration events of the team contract.

Contract (schemas/case/*.avsc): aggregate ``case``,
aggregate id = case id, source ``case``, topic ``outbox.event.case``. Versions written:
:data:`EVENT_VERSIONS` (pinned here, not "newest", so a later schema version cannot change
what this code writes unnoticed).
correlation_id = the case id for events caused by an HTTP command; for events caused by
a saga request it is the request's correlation id, and causation_id is its event id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from casestream.events import Envelope, new_event

from services.case.domain.events import (
    AppealSubmitted,
    CaseAssigned,
    CaseClosed,
    CaseEscalated,
    CaseEvent,
    CaseOpened,
    CaseReturned,
    CaseSubmitted,
    CaseWithdrawn,
    EvidenceOverdue,
    NoticeCorrectionOrdered,
    EvidenceRequested,
    EvidenceSubmitted,
    ReviewStarted,
)

AGGREGATE_TYPE = "case"
SOURCE = "case"
EVENT_VERSIONS: dict[str, int] = {
    "CaseOpened": 3,
    "CaseSubmitted": 1,
    "CaseClosed": 1,
    "CaseReturned": 1,
    "CaseAssigned": 1,
    "EvidenceRequested": 2,
    "EvidenceSubmitted": 1,
    "ReviewStarted": 1,
    "CaseWithdrawn": 1,
    "AppealSubmitted": 1,
    "EvidenceOverdue": 2,
    "NoticeCorrectionOrdered": 1,
    "CaseEscalated": 1,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Causation:
    """Why events are written: the journey they belong to and what triggered them.

    Attributes:
        correlation_id: the journey id; None means "the case id".
        causation_id: event id of the triggering event; None for HTTP commands.
        traceparent: W3C traceparent of the current span, if any.
    """

    correlation_id: str | None = None
    causation_id: str | None = None
    traceparent: str | None = None


def payload_of(event: CaseEvent, reporter_email: str = "") -> tuple[str, dict[str, Any]]:
    """Return ``(event_type, payload)`` for a domain event, per the contract schemas.

    ``reporter_email`` fills AppealSubmitted and NoticeCorrectionOrdered (the party a
    correction notice goes to).

    Raises:
        TypeError: for an event type this mapping does not know (a programming error).
    """
    match event:
        case CaseOpened(content=c):
            return "CaseOpened", {
                "title": c.title, "summary": c.summary, "severity": c.severity,
                "evidence_count": c.evidence_count, "reporter_email": c.reporter_email,
                "priority": c.priority.value,
            }
        case CaseSubmitted(content=c, actor_id=actor):
            return "CaseSubmitted", {
                "title": c.title, "severity": c.severity, "evidence_count": c.evidence_count,
                "reporter_email": c.reporter_email, "submitted_by": actor,
            }
        case CaseClosed(outcome=outcome, penalty_cents=penalty):
            return "CaseClosed", {"outcome": outcome.value, "penalty_cents": penalty}
        case CaseReturned(reason=reason):
            return "CaseReturned", {"reason": reason}
        case CaseAssigned(officer_id=officer, previous_officer_id=previous):
            return "CaseAssigned", {"officer_id": officer, "previous_officer_id": previous}
        case EvidenceRequested(request_id=rid, description=text, due_at=due):
            return "EvidenceRequested", {"request_id": rid, "due_at": due, "description": text}
        case EvidenceSubmitted():
            return "EvidenceSubmitted", {
                "request_id": event.request_id, "evidence_id": event.evidence_id,
                "name": event.name, "media_type": event.media_type,
                "size_bytes": event.size_bytes, "sha256": event.sha256}
        case ReviewStarted(officer_id=officer):
            return "ReviewStarted", {"officer_id": officer}
        case CaseWithdrawn(reason=reason):
            return "CaseWithdrawn", {"reason": reason}
        case EvidenceOverdue(request_id=rid, due_at=due, escalate_at=escalate, recipient_email=to):
            return "EvidenceOverdue", {"request_id": rid, "due_at": due, "escalate_at": escalate,
                                       "recipient_email": to}
        case CaseEscalated(reason=reason):
            return "CaseEscalated", {"reason": reason}
        case AppealSubmitted(reason=reason, outcome=outcome, penalty_cents=penalty):
            return "AppealSubmitted", {"reason": reason, "outcome": outcome.value,
                                       "penalty_cents": penalty, "reporter_email": reporter_email}
        case NoticeCorrectionOrdered(reason=reason, penalty_cents=penalty, actor_id=actor):
            return "NoticeCorrectionOrdered", {"reason": reason, "penalty_cents": penalty,
                                               "reporter_email": reporter_email,
                                               "ordered_by": actor}
    raise TypeError(f"no integration event for {type(event).__name__}")


def to_envelopes(events: list[CaseEvent], causation: Causation,
                 reporter_email: str = "") -> list[Envelope]:
    """Map domain events (oldest first) to envelopes ready for the outbox, same order."""
    envelopes = []
    for event in events:
        event_type, payload = payload_of(event, reporter_email)
        envelopes.append(new_event(
            event_type=event_type,
            event_version=EVENT_VERSIONS[event_type],
            aggregate_type=AGGREGATE_TYPE,
            aggregate_id=event.case_id,
            aggregate_version=event.version,
            payload=payload,
            tenant_id=event.tenant_id,
            source=SOURCE,
            actor_id=event.actor_id,
            correlation_id=causation.correlation_id or event.case_id,
            causation_id=causation.causation_id,
            traceparent=causation.traceparent,
            occurred_at=event.occurred_at,
        ))
    return envelopes
