"""Unit tests of the audit rules: case of an event, summaries (services.audit.domain)."""

from __future__ import annotations

import pytest

from services.audit.domain import KNOWN_EVENT_TYPES, case_id_of, summarize


def test_case_events_belong_to_their_aggregate() -> None:
    assert case_id_of("case", "c-1", {"case_id": "other"}) == "c-1"


@pytest.mark.parametrize("aggregate_type", ["saga", "decision", "notice"])
def test_other_events_belong_to_payload_case_id(aggregate_type: str) -> None:
    assert case_id_of(aggregate_type, "agg-9", {"case_id": "c-2"}) == "c-2"


def test_event_without_case_belongs_to_no_timeline() -> None:
    assert case_id_of("saga", "s-1", {}) is None
    assert case_id_of("saga", "s-1", {"case_id": ""}) is None


def test_every_contract_event_type_has_a_summary() -> None:
    expected = {"CaseOpened", "CaseSubmitted", "CaseClosed", "CaseReturned", "CaseRetitled",
                "CaseReprioritized",
                "DecisionRequested", "NoticeRequested", "CaseCloseRequested",
                "CaseReturnRequested", "SagaCompleted", "SagaCompensated",
                "ViolationDetermined", "NoViolationFound", "DecisionFailed",
                "NoticeIssued", "NoticeFailed", "PenaltyProposed", "CaseAssigned",
                "EvidenceRequested", "EvidenceSubmitted", "ReviewStarted", "CaseWithdrawn",
                "AppealSubmitted", "EvidenceOverdue", "CaseEscalated", "EvidenceReminderSent"}
    assert KNOWN_EVENT_TYPES == expected


@pytest.mark.parametrize(("event_type", "payload", "summary"), [
    ("CaseOpened", {"title": "T", "severity": 3, "priority": "HIGH"},
     "Case opened: T (severity 3, priority HIGH)"),
    ("CaseClosed", {"outcome": "violation", "penalty_cents": 12_505},
     "Case closed: violation, penalty 125.05"),
    ("CaseClosed", {"outcome": "no_violation", "penalty_cents": None},
     "Case closed: no_violation, no penalty"),
    ("DecisionFailed", {"reason": "rules\nengine   down"}, "Decision failed: rules engine down"),
    ("Unheard", {}, "Unheard v4"),
])
def test_summaries(event_type: str, payload: dict[str, object], summary: str) -> None:
    assert summarize(event_type, 4 if event_type == "Unheard" else 1, payload) == summary


def test_summaries_never_show_email_addresses() -> None:
    payload = {"case_id": "c", "saga_id": "s", "recipient_email": "someone@example.org",
               "reporter_email": "someone@example.org", "message_id": "<m@x>", "title": "t",
               "submitted_by": "officer", "penalty_cents": 1, "violation_code": "V1"}
    for event_type in KNOWN_EVENT_TYPES:
        assert "someone@example.org" not in summarize(event_type, 1, payload)


def test_summary_is_bounded() -> None:
    text = summarize("CaseReturned", 1, {"reason": "x" * 1000})
    assert len(text) == 300 and text.endswith("…")
