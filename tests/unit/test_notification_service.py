"""Notification use cases with in-memory adapters: recording requests and the sender's
outcomes (sent, bounded retries, permanent failure, undeliverable recipient)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from casestream.events.envelope import Envelope, new_event
from casestream.testing import MemorySink
from services.notification.adapters.memory import FakeMailer, MemoryNoticeStore
from services.notification.application.requests import record_request
from services.notification.application.sender import NoticeSender
from casestream.retry import RetryPolicy
from services.notification.domain import NoticeStatus
from services.notification.domain.errors import MailError

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def requested(case_id: str = "case-1", *, saga_id: str = "saga-1",
              email: str = "owner@example.org") -> Envelope:
    return new_event(event_type="NoticeRequested", aggregate_type="saga", aggregate_id=saga_id,
                     aggregate_version=2, tenant_id="tenant-a", source="saga",
                     actor_id="saga-orchestrator", correlation_id=case_id,
                     payload={"case_id": case_id, "recipient_email": email,
                              "penalty_cents": 400_000, "violation_code": "REG-4"})


@pytest.fixture
def world():
    clock = Clock()
    sender = NoticeSender(policy=RetryPolicy(max_attempts=3, initial_delay_s=1, max_delay_s=10,
                                             jitter=0.0), clock=clock)
    return clock, sender, MemoryNoticeStore(), FakeMailer(), MemorySink()


def request_failing(world, failures: list[MailError]) -> None:
    """Record one notice request, its mailer failing with ``failures`` in turn."""
    clock, _, store, mailer, sink = world
    mailer.failures = failures
    record_request(store, sink, requested(), clock=clock)


def test_request_is_recorded_pending_and_nothing_is_sent_by_the_handler(world) -> None:
    clock, _, store, mailer, sink = world
    req = requested()
    notice = record_request(store, sink, req, clock=clock)
    assert notice.status is NoticeStatus.PENDING and notice.saga_id == "saga-1"
    assert notice.message_id == "<case-1@notice.casestream>"
    assert mailer.attempts == 0 and sink.events == [] and store.wakeups == 1


def test_sender_sends_once_and_emits_notice_issued(world) -> None:
    clock, sender, store, mailer, sink = world
    req = requested()
    record_request(store, sink, req, clock=clock)
    sent = sender.send_next(store, mailer, sink)
    assert sent is not None and sent.status is NoticeStatus.SENT
    assert [m["Message-ID"] for m in mailer.sent] == ["<case-1@notice.casestream>"]
    [ev] = sink.events
    assert ev.event_type == "NoticeIssued"
    assert ev.payload == {"case_id": "case-1", "saga_id": "saga-1",
                          "recipient_email": "owner@example.org",
                          "message_id": "<case-1@notice.casestream>", "document_sha256": ""}
    assert (ev.aggregate_type, ev.aggregate_id, ev.aggregate_version) == ("notice", "case-1", 1)
    assert ev.causation_id == req.event_id and ev.correlation_id == "case-1"
    assert sender.send_next(store, mailer, sink) is None  # nothing left: never sent twice
    assert len(mailer.sent) == 1


def test_second_request_for_the_case_never_sends_a_second_mail(world) -> None:
    clock, sender, store, mailer, sink = world
    record_request(store, sink, requested(), clock=clock)
    sender.send_next(store, mailer, sink)
    again = record_request(store, sink, requested(saga_id="saga-2"), clock=clock)
    assert again.status is NoticeStatus.SENT and again.version == 2
    assert sender.send_next(store, mailer, sink) is None
    assert len(mailer.sent) == 1
    assert [(e.event_type, e.payload["saga_id"], e.aggregate_version) for e in sink.events] == [
        ("NoticeIssued", "saga-1", 1), ("NoticeIssued", "saga-2", 2)]


def test_pending_notice_is_readdressed_to_the_newest_saga(world) -> None:
    clock, sender, store, mailer, sink = world
    record_request(store, sink, requested(), clock=clock)
    record_request(store, sink, requested(saga_id="saga-2"), clock=clock)
    assert sink.events == []
    sender.send_next(store, mailer, sink)
    assert sink.events[0].payload["saga_id"] == "saga-2" and len(mailer.sent) == 1


def test_transient_failures_are_retried_with_backoff_then_succeed(world) -> None:
    clock, sender, store, mailer, sink = world
    request_failing(world, [MailError("421 busy", permanent=False)])
    pending = sender.send_next(store, mailer, sink)
    assert pending is not None and pending.status is NoticeStatus.PENDING
    assert pending.attempts == 1 and pending.next_attempt_at == T0 + timedelta(seconds=1)
    assert sender.send_next(store, mailer, sink) is None  # not due yet
    clock.now = T0 + timedelta(seconds=1)
    sent = sender.send_next(store, mailer, sink)
    assert sent is not None and sent.status is NoticeStatus.SENT and sent.attempts == 2
    assert [e.event_type for e in sink.events] == ["NoticeIssued"]


def test_retries_are_bounded_then_notice_failed(world) -> None:
    clock, sender, store, mailer, sink = world
    request_failing(world, [MailError("connection refused", permanent=False)] * 3)
    for _ in range(3):
        sender.send_next(store, mailer, sink)
        clock.now += timedelta(seconds=30)
    notice = store.get("case-1")
    assert notice is not None and notice.status is NoticeStatus.FAILED and notice.attempts == 3
    [ev] = sink.events
    assert ev.event_type == "NoticeFailed" and "3 times" in ev.payload["reason"]
    assert mailer.sent == [] and mailer.attempts == 3


def test_permanent_smtp_failure_fails_at_once(world) -> None:
    clock, sender, store, mailer, sink = world
    request_failing(world, [MailError("550 no such user", permanent=True)])
    failed = sender.send_next(store, mailer, sink)
    assert failed is not None and failed.status is NoticeStatus.FAILED
    assert sink.events[0].event_type == "NoticeFailed"
    assert "550" in sink.events[0].payload["reason"]


def test_fail_invalid_recipient_fails_without_an_smtp_attempt(world) -> None:
    clock, sender, store, mailer, sink = world
    record_request(store, sink, requested(email="owner@fail.invalid"), clock=clock)
    failed = sender.send_next(store, mailer, sink)
    assert failed is not None and failed.status is NoticeStatus.FAILED
    assert mailer.attempts == 0
    [ev] = sink.events
    assert ev.event_type == "NoticeFailed" and "fail.invalid" in ev.payload["reason"]
    assert ev.payload["saga_id"] == "saga-1"


def test_send_retries_back_off_exponentially_with_a_cap_then_give_up() -> None:
    sender = NoticeSender(policy=RetryPolicy(max_attempts=5, initial_delay_s=1, max_delay_s=5,
                                             jitter=0.0), clock=Clock())
    waits = [sender.next_attempt_at(n, T0) for n in range(1, 6)]
    assert [w - T0 for w in waits[:4] if w is not None] == [
        timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4), timedelta(seconds=5)]
    assert waits[4] is None


def test_the_notice_pdf_is_attached_and_its_hash_is_in_notice_issued(world) -> None:
    import hashlib

    from services.notification.adapters.pdf import render_notice_pdf

    clock, sender, store, mailer, sink = world
    sender.render = render_notice_pdf
    record_request(store, sink, requested(), clock=clock)
    sent = sender.send_next(store, mailer, sink)
    assert sent is not None
    [message] = mailer.sent
    [attachment] = list(message.iter_attachments())
    pdf = attachment.get_content()
    assert attachment.get_content_type() == "application/pdf" and pdf.startswith(b"%PDF-")
    assert attachment.get_filename() == "notice-case-1.pdf"
    assert sink.events[0].payload["document_sha256"] == hashlib.sha256(pdf).hexdigest()
    assert sent.document_sha256 == hashlib.sha256(pdf).hexdigest()
    assert render_notice_pdf(sent) == pdf  # deterministic: a re-send carries the same document
