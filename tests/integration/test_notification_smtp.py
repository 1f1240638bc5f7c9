"""Notification against the real PostgreSQL and a real SMTP server.

The SMTP server is the project's own sink (``deploy/smtp_sink.py``, aiosmtpd, one ``.eml``
file per accepted message) started in-process on a free port with a private maildir, so
each test sees exactly the mails it caused. ``test_infra_sink_receives_the_notice`` also
sends through the infrastructure's sink (fixtures ``smtp_address`` / ``smtp_maildir``).

Covers: one mail per notice with its deterministic Message-ID, the sent/issued bookkeeping
in one transaction, several senders never sending one notice twice, the LISTEN/NOTIFY
wake-up, bounded retries when SMTP is down, a 550 refusal, the ``@fail.invalid`` hook, and
the documented crash windows (before the SMTP ``250``: no duplicate; after it but before
the commit: one duplicate carrying the same Message-ID).
"""

from __future__ import annotations

import email
import importlib.util
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from aiosmtpd.controller import Controller
from psycopg_pool import ConnectionPool

from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.outbox.writer import OutboxWriter
from casestream.outbox import OutboxSink
from services.notification.adapters.postgres import PgNoticeStore
from services.notification.adapters.sender_worker import SenderWorker
from services.notification.adapters.smtp import SmtpMailer
from services.notification.application.requests import record_request
from services.notification.application.sender import NoticeSender
from services.notification.bootstrap import migrations
from casestream.retry import RetryPolicy
from casestream.testing.relay import free_port
from services.notification.domain import NoticeStatus, message_id_for

REPO = Path(__file__).resolve().parents[2]  # the repository root (deploy/smtp_sink.py)


# -- fixtures ----------------------------------------------------------------------------
@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    """A fresh schema in ``casestream_test`` with the notification migrations applied."""
    return private_schema("notif_t", migrations())


def _sink_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("casestream_smtp_sink", REPO / "deploy" / "smtp_sink.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Sink:
    """The project's SMTP sink on a free port with a private maildir."""

    def __init__(self, maildir: Path):
        module = _sink_module()
        self.maildir = maildir
        self.port = free_port()
        self.controller = Controller(module.MaildirHandler(maildir, module.DEFAULT_REJECT),
                                     hostname="127.0.0.1", port=self.port)

    def messages(self) -> list[email.message.Message]:
        return [email.message_from_bytes(p.read_bytes())
                for p in sorted(self.maildir.glob("*.eml"))]


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Sink]:
    s = Sink(tmp_path / "mail")
    s.controller.start()
    try:
        yield s
    finally:
        s.controller.stop()


def requested(case_id: str, *, email_to: str = "owner@example.org") -> Envelope:
    return new_event(event_type="NoticeRequested", aggregate_type="saga",
                     aggregate_id=str(uuid.uuid4()), aggregate_version=2, tenant_id="tenant-a",
                     source="saga", actor_id="saga-orchestrator", correlation_id=case_id,
                     payload={"case_id": case_id, "recipient_email": email_to,
                              "penalty_cents": 400_000, "violation_code": "REG-4"})


def utc_now() -> datetime:
    return datetime.now(UTC)


def record(dsn: str, codec: EnvelopeCodec, *events: Envelope) -> None:
    """What the consumer handler does, in one committed transaction."""
    with psycopg.connect(dsn) as conn:
        for ev in events:
            record_request(PgNoticeStore(conn), OutboxSink(OutboxWriter(codec), conn), ev,
                           clock=utc_now)
        conn.commit()


def worker(pool: ConnectionPool, dsn: str, codec: EnvelopeCodec, mailer: object, *,
           attempts: int = 3, interval_s: float = 0.2) -> SenderWorker:
    sender = NoticeSender(policy=RetryPolicy(max_attempts=attempts, initial_delay_s=0.05,
                                             max_delay_s=0.1, jitter=0.0),
                          clock=utc_now)
    return SenderWorker(pool, dsn, sender, mailer, OutboxWriter(codec),  # type: ignore[arg-type]
                        interval_s=interval_s)


def outbox_events(dsn: str, codec: EnvelopeCodec) -> list[Envelope]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
    return [codec.decode(bytes(r[0])) for r in rows]


def status_of(dsn: str, case_id: str) -> tuple[str, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status, attempts FROM notice WHERE case_id = %s",
                           (case_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


# -- tests -------------------------------------------------------------------------------
def test_notice_is_mailed_once_and_issued(dsn: str, sink: Sink, codec: EnvelopeCodec) -> None:
    req = requested("case-1")
    record(dsn, codec, req, req)  # a redelivered request records nothing new
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        w = worker(pool, dsn, codec, SmtpMailer("127.0.0.1", sink.port))
        assert w.drain() == 1
        assert w.drain() == 0
    [mail] = sink.messages()
    assert mail["Message-ID"] == message_id_for("case-1")
    assert mail["X-Original-To"] == "owner@example.org"
    assert status_of(dsn, "case-1") == ("sent", 1)
    [issued] = outbox_events(dsn, codec)
    assert issued.event_type == "NoticeIssued"
    assert issued.payload["message_id"] == message_id_for("case-1")
    assert issued.payload["saga_id"] == req.aggregate_id and issued.causation_id == req.event_id


def test_a_case_has_its_notice_and_one_correction_in_postgres(dsn: str, sink: Sink,
                                                              codec: EnvelopeCodec) -> None:
    import hashlib

    from services.notification.adapters.pdf import render_notice_pdf
    from services.notification.domain import NoticeKind

    notice = requested("case-c")
    correction = new_event(event_type="CorrectionNoticeRequested", aggregate_type="saga",
                           aggregate_id=str(uuid.uuid4()), aggregate_version=1,
                           tenant_id="tenant-a", source="saga", actor_id="saga-orchestrator",
                           correlation_id="case-c",
                           payload={"case_id": "case-c", "recipient_email": "owner@example.org",
                                    "reason": "appeal upheld", "penalty_cents": 0})
    record(dsn, codec, notice, correction, correction)  # the correction redelivered
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        sender = NoticeSender(policy=RetryPolicy(max_attempts=2, initial_delay_s=0.05,
                                                 max_delay_s=0.1, jitter=0.0),
                              clock=utc_now, render=render_notice_pdf)
        w = SenderWorker(pool, dsn, sender, SmtpMailer("127.0.0.1", sink.port),
                         OutboxWriter(codec), interval_s=0.2)
        assert w.drain() == 2 and w.drain() == 0
    mails = sink.messages()
    assert sorted(m["Message-ID"] for m in mails) == sorted(
        [message_id_for("case-c"), message_id_for("case-c", NoticeKind.CORRECTION)])
    with psycopg.connect(dsn) as conn:
        rows = dict(conn.execute("SELECT kind, document_sha256 FROM notice WHERE case_id = %s",
                                 ("case-c",)).fetchall())
    [fixed] = [m for m in mails if m["X-Casestream-Notice-Kind"] == "correction"]
    [pdf] = [p for p in fixed.walk() if p.get_content_type() == "application/pdf"]
    assert rows["correction"] == hashlib.sha256(pdf.get_payload(decode=True)).hexdigest()
    assert rows["notice"] is not None and rows["notice"] != rows["correction"]
    events = [(e.event_type, e.aggregate_id) for e in outbox_events(dsn, codec)]
    assert sorted(events) == [("CorrectionNoticeIssued", "case-c/correction"),
                              ("NoticeIssued", "case-c")]


def overdue(case_id: str, request_id: str) -> Envelope:
    now = utc_now()
    return new_event(event_type="EvidenceOverdue", event_version=2, aggregate_type="case",
                     aggregate_id=case_id, aggregate_version=5, tenant_id="tenant-a",
                     source="case", actor_id="evidence-deadlines", correlation_id=case_id,
                     payload={"request_id": request_id, "due_at": now, "escalate_at": now,
                              "recipient_email": "party@example.org"})


def test_a_twice_delivered_evidence_overdue_mails_one_reminder(dsn: str, sink: Sink,
                                                               codec: EnvelopeCodec) -> None:
    from casestream.handlers import HandlerContext, HandlerRegistry
    from casestream.handlers.processing import ProcessingMode
    from services.notification.adapters import handlers

    registry = handlers.register(HandlerRegistry(), clock=utc_now)
    [handler] = registry.handlers_for("EvidenceOverdue", ProcessingMode.LIVE)
    first, second = overdue("case-r", "req-1"), overdue("case-r", "req-2")
    with psycopg.connect(dsn) as conn:
        ctx = HandlerContext(conn=conn, outbox=OutboxWriter(codec), mode=ProcessingMode.LIVE,
                             consumer=handlers.CONSUMER)
        for event in (first, first, second):  # the first delivered twice
            handler.fn(ctx, event)
        conn.commit()
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        w = worker(pool, dsn, codec, SmtpMailer("127.0.0.1", sink.port))
        assert w.drain() == 2 and w.drain() == 0
        with pool.connection() as conn:  # delivered again after the mail went out
            handler.fn(HandlerContext(conn=conn, outbox=OutboxWriter(codec),
                                      mode=ProcessingMode.LIVE, consumer=handlers.CONSUMER), first)
        assert w.drain() == 0
    mails = sink.messages()
    assert sorted(m["Message-ID"] for m in mails) == [
        "<case-r.evidence_reminder.req-1@notice.casestream>",
        "<case-r.evidence_reminder.req-2@notice.casestream>"]
    assert {m["X-Original-To"] for m in mails} == {"party@example.org"}
    sent = outbox_events(dsn, codec)
    assert sorted((e.event_type, e.payload["request_id"], e.causation_id) for e in sent) == sorted(
        [("EvidenceReminderSent", "req-1", first.event_id),
         ("EvidenceReminderSent", "req-2", second.event_id)])


def test_concurrent_senders_send_every_notice_exactly_once(dsn: str, sink: Sink,
                                                           codec: EnvelopeCodec) -> None:
    cases = [f"case-{i}" for i in range(30)]
    record(dsn, codec, *(requested(c) for c in cases))
    with ConnectionPool(dsn, min_size=2, max_size=6) as pool:
        workers = [worker(pool, dsn, codec, SmtpMailer("127.0.0.1", sink.port)) for _ in range(3)]
        threads = [threading.Thread(target=w.drain) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    ids = [m["Message-ID"] for m in sink.messages()]
    assert sorted(ids) == sorted(message_id_for(c) for c in cases)
    assert len([e for e in outbox_events(dsn, codec) if e.event_type == "NoticeIssued"]) == 30


def test_sender_wakes_up_on_notify(dsn: str, sink: Sink, codec: EnvelopeCodec) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=3) as pool:
        w = worker(pool, dsn, codec, SmtpMailer("127.0.0.1", sink.port), interval_s=30.0)
        stop = threading.Event()
        t = threading.Thread(target=w, args=(stop,))
        t.start()
        try:
            time.sleep(0.5)  # the worker is now blocked waiting (poll interval 30 s)
            t0 = time.monotonic()
            record(dsn, codec, requested("case-wake"))
            while not sink.messages() and time.monotonic() - t0 < 10:
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            t.join(40)
    assert len(sink.messages()) == 1
    assert elapsed < 5, f"woken only after {elapsed:.1f} s: NOTIFY did not wake the sender"


def test_smtp_down_is_retried_then_notice_failed(dsn: str, codec: EnvelopeCodec) -> None:
    record(dsn, codec, requested("case-down"))
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        w = worker(pool, dsn, codec, SmtpMailer("127.0.0.1", free_port(), timeout_s=2),
                   attempts=3)
        deadline = time.monotonic() + 10
        while status_of(dsn, "case-down")[0] == "pending" and time.monotonic() < deadline:
            w.drain()
            time.sleep(0.05)
    assert status_of(dsn, "case-down") == ("failed", 3)
    [failed] = outbox_events(dsn, codec)
    assert failed.event_type == "NoticeFailed"
    assert "3 times" in failed.payload["reason"]


def test_refused_recipient_and_fail_hook_give_notice_failed(dsn: str, sink: Sink,
                                                           codec: EnvelopeCodec) -> None:
    record(dsn, codec, requested("case-550", email_to="someone@mail.invalid"),
           requested("case-hook", email_to="someone@fail.invalid"))
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        assert worker(pool, dsn, codec, SmtpMailer("127.0.0.1", sink.port)).drain() == 2
    assert sink.messages() == []
    assert status_of(dsn, "case-550") == ("failed", 1)  # the sink answered 550: one attempt
    assert status_of(dsn, "case-hook") == ("failed", 0)  # the hook: no SMTP attempt at all
    reasons = {e.aggregate_id: e.payload["reason"] for e in outbox_events(dsn, codec)}
    assert "550" in reasons["case-550"] and "fail.invalid" in reasons["case-hook"]


class Crash(Exception):
    """Simulates the process dying at a point of the send."""


class CrashingMailer:
    """Sends through ``inner`` and then dies (after=True), or dies before sending."""

    def __init__(self, inner: SmtpMailer, *, after: bool):
        self.inner = inner
        self.after = after

    def send(self, message: EmailMessage) -> None:
        if not self.after:
            raise Crash("killed before the SMTP DATA was accepted")
        self.inner.send(message)
        raise Crash("killed after the SMTP 250, before the commit")


@contextmanager
def crashed_once(dsn: str, codec: EnvelopeCodec, sink: Sink, case_id: str,
                 *, after: bool) -> Iterator[tuple[ConnectionPool[Any], SmtpMailer]]:
    """Record a notice request for ``case_id`` and crash its first send (``after``: once
    the sink has the message); yield the pool and the sink's mailer to carry on with."""
    record(dsn, codec, requested(case_id))
    mailer = SmtpMailer("127.0.0.1", sink.port)
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        with pytest.raises(Crash):
            worker(pool, dsn, codec, CrashingMailer(mailer, after=after)).run_once()
        yield pool, mailer


def test_crash_before_the_smtp_reply_loses_nothing_and_doubles_nothing(
        dsn: str, sink: Sink, codec: EnvelopeCodec) -> None:
    with crashed_once(dsn, codec, sink, "case-c1", after=False) as (pool, mailer):
        assert status_of(dsn, "case-c1") == ("pending", 0)  # rolled back, still owed
        assert worker(pool, dsn, codec, mailer).drain() == 1
    assert [m["Message-ID"] for m in sink.messages()] == [message_id_for("case-c1")]


def test_crash_after_the_smtp_reply_is_the_documented_window(
        dsn: str, sink: Sink, codec: EnvelopeCodec) -> None:
    """The one case that duplicates: the duplicate carries the same Message-ID."""
    with crashed_once(dsn, codec, sink, "case-c2", after=True) as (pool, mailer):
        assert worker(pool, dsn, codec, mailer).drain() == 1
    ids = [m["Message-ID"] for m in sink.messages()]
    assert ids == [message_id_for("case-c2")] * 2
    assert len(outbox_events(dsn, codec)) == 1  # but the saga hears of it once


def test_infra_sink_receives_the_notice(dsn: str, codec: EnvelopeCodec,
                                       smtp_address: tuple[str, int], smtp_maildir: Path) -> None:
    host, port = smtp_address
    case_id = f"case-{uuid.uuid4()}"
    record(dsn, codec, requested(case_id))
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        assert worker(pool, dsn, codec, SmtpMailer(host, port)).drain() == 1
    assert status_of(dsn, case_id) == (NoticeStatus.SENT.value, 1)
    found = [p for p in smtp_maildir.glob("*.eml") if message_id_for(case_id) in p.read_text()]
    assert len(found) == 1
