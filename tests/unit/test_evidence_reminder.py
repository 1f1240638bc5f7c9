"""The evidence reminder: the case's EvidenceOverdue (v2) names the party, the notification
service mails one reminder per case and evidence request and records EvidenceReminderSent —
with in-memory adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from casestream.handlers import HandlerRegistry
from casestream.handlers.processing import ProcessingMode
from casestream.events import Envelope, new_event
from casestream.retry import RetryPolicy
from casestream.testing import MemorySink
from services.notification.adapters import handlers
from services.notification.adapters.memory import FakeMailer, MemoryNoticeStore
from services.notification.application.requests import record_reminder
from services.notification.application.sender import NoticeSender
from services.notification.domain import NoticeKind, NoticeStatus
from casestream_suite_schemas.upcasters import evidence_overdue_v1_v2

T0 = datetime(2025, 5, 16, 9, 0, tzinfo=UTC)
CASE = "case-7"


def clock() -> datetime:
    return T0


def overdue(request_id: str | None = "req-1", *, email: str | None = "party@example.org",
            version: int = 5) -> Envelope:
    payload = {"request_id": request_id, "due_at": T0 - timedelta(days=1),
               "escalate_at": T0 + timedelta(days=7), "recipient_email": email}
    return new_event(event_type="EvidenceOverdue", event_version=2, aggregate_type="case",
                     aggregate_id=CASE, aggregate_version=version, tenant_id="tenant-a",
                     source="case", actor_id="evidence-deadlines", correlation_id=CASE,
                     payload=payload)


@pytest.fixture
def world() -> tuple[NoticeSender, MemoryNoticeStore, FakeMailer, MemorySink]:
    sender = NoticeSender(policy=RetryPolicy(max_attempts=2, initial_delay_s=1, max_delay_s=1,
                                             jitter=0.0), clock=clock)
    return sender, MemoryNoticeStore(), FakeMailer(), MemorySink()


def drain(world) -> None:
    sender, store, mailer, sink = world
    while sender.send_next(store, mailer, sink) is not None:
        pass


def test_a_twice_delivered_overdue_mails_one_reminder_and_records_it_once(world) -> None:
    _, store, mailer, sink = world
    event = overdue()
    assert record_reminder(store, event, clock=clock) is not None
    drain(world)
    again = record_reminder(store, event, clock=clock)  # redelivered after the mail went out
    drain(world)
    assert again is not None and again.status is NoticeStatus.SENT
    [mail] = mailer.sent
    assert mail["To"] == "party@example.org"
    assert mail["Message-ID"] == f"<{CASE}.evidence_reminder.req-1@notice.casestream>"
    assert mail["X-Casestream-Notice-Kind"] == "evidence_reminder"
    assert "X-Casestream-Saga-Id" not in mail and not list(mail.iter_attachments())
    assert "overdue" in mail["Subject"] and "manual review" in mail.get_content()
    [sent] = sink.events
    assert sent.event_type == "EvidenceReminderSent" and sent.event_version == 1
    assert sent.payload == {"case_id": CASE, "request_id": "req-1",
                            "recipient_email": "party@example.org",
                            "message_id": mail["Message-ID"]}
    assert sent.aggregate_id == f"{CASE}/evidence_reminder/req-1" and sent.aggregate_version == 1
    assert sent.causation_id == event.event_id and sent.correlation_id == CASE


def test_a_redelivery_while_pending_sends_one_mail(world) -> None:
    _, store, mailer, sink = world
    event = overdue()
    record_reminder(store, event, clock=clock)
    record_reminder(store, event, clock=clock)
    drain(world)
    assert len(mailer.sent) == 1 and [e.event_type for e in sink.events] == ["EvidenceReminderSent"]


def test_a_second_evidence_request_gets_its_own_reminder(world) -> None:
    _, store, mailer, sink = world
    record_reminder(store, overdue("req-1"), clock=clock)
    record_reminder(store, overdue("req-2", version=9), clock=clock)
    drain(world)
    assert sorted(m["Message-ID"] for m in mailer.sent) == [
        f"<{CASE}.evidence_reminder.req-1@notice.casestream>",
        f"<{CASE}.evidence_reminder.req-2@notice.casestream>"]
    assert sorted(e.payload["request_id"] for e in sink.events) == ["req-1", "req-2"]
    assert store.get(CASE, NoticeKind.EVIDENCE_REMINDER, "req-2") is not None
    assert store.get(CASE, NoticeKind.NOTICE) is None  # the violation notice is a kind of its own


def test_a_v1_overdue_names_no_recipient_and_mails_nothing(world) -> None:
    _, store, mailer, sink = world
    v1 = overdue()
    upcast = evidence_overdue_v1_v2({k: v for k, v in v1.payload.items() if k != "recipient_email"})
    assert upcast["recipient_email"] is None
    assert record_reminder(store, overdue(email=None), clock=clock) is None
    drain(world)
    assert store.notices == {} and mailer.sent == [] and sink.events == []


def test_an_undeliverable_reminder_fails_without_a_notice_failed(world) -> None:
    _, store, mailer, sink = world
    record_reminder(store, overdue(email="party@fail.invalid"), clock=clock)
    drain(world)
    failed = store.get(CASE, NoticeKind.EVIDENCE_REMINDER, "req-1")
    assert failed is not None and failed.status is NoticeStatus.FAILED
    assert "undeliverable" in (failed.last_error or "")
    # no saga waits for a reminder: a NoticeFailed would move the case's saga
    assert mailer.sent == [] and sink.events == []


def test_the_reminder_handler_is_a_process_handler_never_run_by_replay() -> None:
    registry = handlers.register(HandlerRegistry(), clock=clock)
    assert "outbox.event.case" in handlers.TOPICS
    assert registry.handlers_for("EvidenceOverdue", ProcessingMode.LIVE)
    assert registry.handlers_for("EvidenceOverdue", ProcessingMode.REPLAY) == ()
    # the mail leaves in the sender worker: the handler only writes rows, so the runtime's
    # pipelined fast path may take it (a SIDE_EFFECT handler sends batches to savepoints)
    assert not registry.has_side_effects("EvidenceOverdue", ProcessingMode.LIVE)
