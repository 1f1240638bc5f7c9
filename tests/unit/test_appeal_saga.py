"""Several saga definitions in one orchestrator (a team's own pair, and the suite's
case-review + appeal), the appeal saga's two paths with the decision rule and the
notification service's correction / rejection notices — all with in-memory adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from casestream.events import Envelope, new_event
from casestream.retry import RetryPolicy
from casestream.testing import MemorySink
from services.decision.application.decide import appeal_replies
from services.decision.domain import rule_on_appeal
from services.notification.adapters.memory import FakeMailer, MemoryNoticeStore
from services.notification.adapters.pdf import render_notice_pdf
from services.notification.application.requests import record_request
from services.notification.application.sender import NoticeSender
from services.notification.domain import NoticeKind, NoticeStatus
from services.saga.adapters.memory import MemorySagaStore
from services.saga.application.contract import check_against_catalog
from services.saga.application.orchestrator import Orchestrator, saga_id_for
from services.saga.domain import (
    DEADLINE, DefinitionError, Disposition, Request, SagaDefinition, State, StateKind, Step, StepKind,
    Transition, appeal_saga, case_review_saga, fields,
)
from services.saga.domain import appeal as ap
from casestream.events.catalog import load_catalog
from services import schemas_dir

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CASE = "5d1c8f5e-0000-4000-8000-00000000a001"


def clock() -> datetime:
    return T0


def event(event_type: str, aggregate_type: str, aggregate_id: str, payload: dict[str, Any], *,
          version: int = 1, causation: str | None = None) -> Envelope:
    return new_event(event_type=event_type, aggregate_type=aggregate_type,
                     aggregate_id=aggregate_id, aggregate_version=version, tenant_id="tenant-a",
                     source=aggregate_type, actor_id="svc", correlation_id=aggregate_id,
                     causation_id=causation, payload=payload)


# -- a team's two sagas, neither of them ours -------------------------------------------

def one_step_saga(name: str, start_on: str, request: str, reply: str) -> SagaDefinition:
    """A minimal team saga: ask once, complete on the reply."""
    return SagaDefinition(
        name=name, start_on=start_on, start_record=fields(case_id="aggregate_id"),
        initial="WAITING",
        states=(State(name="WAITING", step="ask"), State(name="DONE", kind=StateKind.TERMINAL),
                State(name="TIMED_OUT", kind=StateKind.TERMINAL)),
        steps=(Step(name="ask", kind=StepKind.PIVOT,
                    action=Request(event_type=request, payload=fields("case_id")),
                    deadline=timedelta(minutes=1)),),
        transitions=(Transition(source="WAITING", on=reply, target="DONE"),
                     Transition(source="WAITING", on=DEADLINE, target="TIMED_OUT")),
    ).validate()


def test_a_team_runs_two_sagas_each_started_by_its_own_event() -> None:
    inspect = one_step_saga("inspection", "SiteReported", "InspectionRequested", "SiteInspected")
    bill = one_step_saga("billing", "FineIssued", "InvoiceRequested", "InvoiceSent")
    orch = Orchestrator([inspect, bill], clock=clock)
    store, sink = MemorySagaStore(), MemorySink()
    assert orch.handles() == {"SiteReported", "SiteInspected", "FineIssued", "InvoiceSent"}

    reported = event("SiteReported", "site", "site-1", {})
    first = orch.handle(store, sink, reported)
    assert [e.event_type for e in sink.events] == ["InspectionRequested"]
    orch.handle(store, sink, event("SiteInspected", "inspector", "site-1",
                                   {"case_id": "site-1", "saga_id": first.saga_id}))
    fined = event("FineIssued", "site", "site-1", {}, version=2)
    second = orch.handle(store, sink, fined)
    assert second.disposition is Disposition.STARTED and second.saga_id != first.saga_id
    saga = store.get(second.saga_id)
    assert saga is not None and saga.definition == "billing" and saga.state == "WAITING"
    assert store.get(first.saga_id).definition == "inspection"  # type: ignore[union-attr]
    assert [e.event_type for e in sink.events] == ["InspectionRequested", "InvoiceRequested"]
    assert sink.events[-1].causation_id == fined.event_id
    # the reply is interpreted by the billing definition, the saga it names
    orch.handle(store, sink, event("InvoiceSent", "billing", "site-1",
                                   {"case_id": "site-1", "saga_id": second.saga_id}))
    assert store.get(second.saga_id).state == "DONE"  # type: ignore[union-attr]


def test_two_definitions_sharing_a_start_event_or_a_name_are_refused() -> None:
    a = one_step_saga("a", "Started", "Asked", "Answered")
    with pytest.raises(DefinitionError, match="both started by Started"):
        Orchestrator([a, one_step_saga("b", "Started", "Asked", "Answered")], clock=clock)
    with pytest.raises(DefinitionError, match="two saga definitions are named 'a'"):
        Orchestrator([a, one_step_saga("a", "Other", "Asked", "Answered")], clock=clock)
    with pytest.raises(DefinitionError, match="at least one"):
        Orchestrator([], clock=clock)


# -- the suite's appeal saga ------------------------------------------------------------

def test_appeal_saga_matches_the_catalog() -> None:
    check_against_catalog(appeal_saga(), load_catalog(schemas_dir()))


def closed_case(orch: Orchestrator, store: MemorySagaStore, sink: MemorySink) -> str:
    """Run a case-review saga of CASE to COMPLETED (violation); return its id."""
    submitted = event("CaseSubmitted", "case", CASE, {
        "title": "Leaky tank", "severity": 4, "evidence_count": 2,
        "reporter_email": "party@example.org", "submitted_by": "officer-7"}, version=2)
    sid = orch.handle(store, sink, submitted).saga_id
    assert sid is not None
    for et, agg, extra in [("ViolationDetermined", "decision",
                            {"violation_code": "REG-4", "penalty_cents": 400_000}),
                           ("NoticeIssued", "notice", {"message_id": "<m>"})]:
        orch.handle(store, sink, event(et, agg, CASE, {"case_id": CASE, "saga_id": sid, **extra}))
    orch.handle(store, sink, event("CaseClosed", "case", CASE,
                                   {"outcome": "violation", "penalty_cents": 400_000}, version=3))
    assert store.get(sid).state == "COMPLETED"  # type: ignore[union-attr]
    return sid


def appealed(reason: str) -> Envelope:
    return event("AppealSubmitted", "case", CASE, {
        "reason": reason, "outcome": "violation", "penalty_cents": 400_000,
        "reporter_email": "party@example.org"}, version=4)


def run_appeal(reason: str) -> tuple[Orchestrator, MemorySagaStore, MemorySink, str, str, Envelope]:
    orch = Orchestrator([case_review_saga(), appeal_saga()], clock=clock)
    store, sink = MemorySagaStore(), MemorySink()
    original = closed_case(orch, store, sink)
    sink.events.clear()
    appeal = appealed(reason)
    started = orch.handle(store, sink, appeal)
    assert started.disposition is Disposition.STARTED
    assert started.saga_id == saga_id_for(appeal.event_id)
    return orch, store, sink, original, started.saga_id, appeal


def test_upheld_appeal_runs_the_correction_path_linked_to_the_first_saga() -> None:
    orch, store, sink, original, sid, appeal = run_appeal("the licence was granted in March")
    saga = store.get(sid)
    assert saga is not None and saga.definition == "appeal"
    assert saga.data["original_saga_id"] == original and saga.correlation_id == sid
    [ask] = sink.events
    assert ask.event_type == "AppealDecisionRequested" and ask.causation_id == appeal.event_id
    [answer] = appeal_replies(ask, now=T0)
    assert answer.event_type == "AppealUpheld" and answer.payload["penalty_cents"] == 0
    assert answer.causation_id == ask.event_id and answer.correlation_id == sid
    orch.handle(store, sink, answer)
    correct = sink.events[-1]
    assert correct.event_type == "CorrectionNoticeRequested" and correct.causation_id == answer.event_id
    assert correct.payload == {"case_id": CASE, "recipient_email": "party@example.org",
                               "penalty_cents": 0, "reason": answer.payload["reason"]}
    orch.handle(store, sink, event("CorrectionNoticeIssued", "notice", f"{CASE}/correction", {
        "case_id": CASE, "saga_id": sid, "recipient_email": "party@example.org",
        "message_id": "<c>", "document_sha256": "ab" * 32}))
    close = sink.events[-1]
    assert close.event_type == "CaseCloseRequested"
    assert close.payload == {"case_id": CASE, "outcome": "no_violation", "penalty_cents": 0}
    orch.handle(store, sink, event("CaseClosed", "case", CASE,
                                   {"outcome": "no_violation", "penalty_cents": None}, version=5))
    assert store.get(sid).state == ap.COMPLETED  # type: ignore[union-attr]
    assert store.get(original).state == "COMPLETED"  # type: ignore[union-attr]  untouched
    assert [e.event_type for e in sink.events] == [
        "AppealDecisionRequested", "CorrectionNoticeRequested", "CaseCloseRequested",
        "SagaCompleted"]


def test_rejected_appeal_tells_the_party_and_closes_with_the_first_decision() -> None:
    orch, store, sink, _, sid, _ = run_appeal("the penalty is too high")
    [answer] = appeal_replies(sink.events[-1], now=T0)
    assert answer.event_type == "AppealRejected"
    orch.handle(store, sink, answer)
    tell = sink.events[-1]
    assert tell.event_type == "AppealRejectionNoticeRequested"
    orch.handle(store, sink, event("AppealRejectionNoticeSent", "notice", f"{CASE}/appeal_rejection",
                                   {"case_id": CASE, "saga_id": sid,
                                    "recipient_email": "party@example.org", "message_id": "<r>"}))
    assert sink.events[-1].payload == {"case_id": CASE, "outcome": "violation",
                                       "penalty_cents": 400_000}
    assert store.get(sid).state == ap.AWAITING_CLOSE  # type: ignore[union-attr]


def test_redelivered_appeal_starts_no_second_appeal_saga() -> None:
    orch, store, sink, _, sid, appeal = run_appeal("new evidence")
    again = orch.handle(store, sink, appeal)
    assert again.saga_id == sid and again.disposition is None
    assert len(sink.events) == 1


def test_appeal_rule_is_deterministic_and_reads_whole_words() -> None:
    assert rule_on_appeal("New EVIDENCE attached").upheld
    assert rule_on_appeal("we hold a permit").upheld
    assert not rule_on_appeal("the penalty is unfair").upheld
    assert not rule_on_appeal("evidenced nothing").upheld  # whole words only
    assert rule_on_appeal("a licence") == rule_on_appeal("a licence")


# -- notification: a notice and a correction per case, each once -----------------------

def request(event_type: str, payload: dict[str, Any], saga: str = "saga-1") -> Envelope:
    return event(event_type, "saga", saga, {"case_id": CASE, "recipient_email": "party@example.org",
                                            **payload}, version=2)


def test_a_case_gets_its_notice_and_one_correction_each_sent_once() -> None:
    store, mailer, sink = MemoryNoticeStore(), FakeMailer(), MemorySink()
    sender = NoticeSender(policy=RetryPolicy(max_attempts=2, initial_delay_s=1, max_delay_s=1,
                                             jitter=0.0), clock=clock, render=render_notice_pdf)
    notice = request("NoticeRequested", {"penalty_cents": 400_000, "violation_code": "REG-4"})
    correction = request("CorrectionNoticeRequested", {"penalty_cents": 0, "reason": "appeal upheld"},
                         saga="saga-2")
    for r in (notice, correction, correction):  # the correction redelivered
        record_request(store, sink, r, clock=clock)
    while sender.send_next(store, mailer, sink) is not None:
        pass
    assert len(mailer.sent) == 2
    first, second = mailer.sent
    assert first["Message-ID"] == f"<{CASE}@notice.casestream>"
    assert second["Message-ID"] == f"<{CASE}.correction@notice.casestream>"
    [pdf] = [p for p in second.iter_attachments()]
    assert pdf.get_filename() == f"correction-{CASE}.pdf"
    assert pdf.get_content().startswith(b"%PDF-")
    issued = [e for e in sink.events if e.event_type in ("NoticeIssued", "CorrectionNoticeIssued")]
    assert [e.event_type for e in issued] == ["NoticeIssued", "CorrectionNoticeIssued"]
    assert issued[1].aggregate_id == f"{CASE}/correction" and issued[1].aggregate_version == 1
    assert issued[1].payload["saga_id"] == "saga-2" and len(issued[1].payload["document_sha256"]) == 64
    # the original stays as it was
    kept = store.get(CASE, NoticeKind.NOTICE)
    assert kept is not None and kept.status is NoticeStatus.SENT and kept.version == 1
    # a later correction request of the same case re-announces, never mails again
    record_request(store, sink, request("CorrectionNoticeRequested",
                                        {"penalty_cents": 0, "reason": "again"}, saga="saga-3"),
                   clock=clock)
    assert len(mailer.sent) == 2
    assert sink.events[-1].event_type == "CorrectionNoticeIssued"
    assert sink.events[-1].aggregate_version == 2


def test_appeal_rejection_mail_is_text_only_and_announced() -> None:
    store, mailer, sink = MemoryNoticeStore(), FakeMailer(), MemorySink()
    sender = NoticeSender(policy=RetryPolicy(max_attempts=2, initial_delay_s=1, max_delay_s=1,
                                             jitter=0.0), clock=clock, render=render_notice_pdf)
    record_request(store, sink, request("AppealRejectionNoticeRequested", {"reason": "it stands"}),
                   clock=clock)
    sender.send_next(store, mailer, sink)
    [mail] = mailer.sent
    assert "rejected" in mail["Subject"] and not list(mail.iter_attachments())
    [sent] = sink.events
    assert sent.event_type == "AppealRejectionNoticeSent"
    assert set(sent.payload) == {"case_id", "saga_id", "recipient_email", "message_id"}
