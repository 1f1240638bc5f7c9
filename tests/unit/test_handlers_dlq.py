"""Unit tests of dead-letter headers, personal-data redaction and failure classification."""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg
import pytest
from psycopg import errors as pgerr

from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.consumer.records import Record
from casestream.consumer.deadletters import DeadLetter, dead_letter_headers, redact, select
from casestream.errors import PoisonMessageError, RegistryUnavailable, RetryableError

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
T1 = datetime(2025, 1, 2, 3, 4, 9, tzinfo=timezone.utc)


def _rec(**kw: object) -> Record:
    base: dict[str, object] = dict(topic="outbox.event.case", partition=2, offset=41,
                                   key=b"case-1", value=b"\x00garbage",
                                   headers=(("id", b"e-1"), ("type", b"CaseOpened")),
                                   timestamp_ms=1700000000123)
    base.update(kw)
    return Record(**base)  # type: ignore[arg-type]


def test_redact_removes_emails_phone_numbers_and_ibans() -> None:
    text = ("duplicate key (reporter_email)=(Jane.Doe+x@example.org) call +44 20 7946 0958 "
            "iban DE89370400440532013000 case 42")
    out = redact(text)
    assert "example.org" not in out and "Jane" not in out
    assert "7946" not in out and "DE89" not in out
    assert "<email>" in out and "<number>" in out and "<iban>" in out
    assert out.endswith("case 42")  # short numbers stay
    assert len(redact("x" * 5000)) == 1000


def test_redact_keeps_the_identifiers_the_error_names() -> None:
    """A schema id or offset is not personal data: the dead letter's error says which one,
    as ``dlq show`` prints it beside."""
    out = redact("schema id 1002003004 (CaseOpened v2): offset 12345678901 of partition 3; "
                 "call 0044 20 7946 0958")
    assert out.startswith("schema id 1002003004 (CaseOpened v2): offset 12345678901 of")
    assert "7946" not in out and out.endswith("call <number>")


def test_dead_letter_headers_carry_everything_issue_4_lists() -> None:
    dl = DeadLetter(record=_rec(), error_class="casestream.errors.PoisonMessageError",
                    reason="bad_magic_byte", message="bad magic for bob@example.com",
                    attempts=1, first_failure=T0, last_failure=T1,
                    correlation_id="corr-1", traceparent="00-abc-def-01")
    h = dict(dead_letter_headers("audit.journal", dl))
    assert h["dlq.original.topic"] == b"outbox.event.case"
    assert h["dlq.original.partition"] == b"2"
    assert h["dlq.original.offset"] == b"41"
    assert h["dlq.original.timestamp"] == b"1700000000123"
    assert h["dlq.consumer"] == b"audit.journal"
    assert h["dlq.error.class"] == b"casestream.errors.PoisonMessageError"
    assert h["dlq.error.reason"] == b"bad_magic_byte"
    assert h["dlq.error.message"] == b"bad magic for <email>"
    assert h["dlq.attempts"] == b"1"
    assert h["dlq.first.failure"] == b"2025-01-02T03:04:05.678Z"
    assert h["dlq.last.failure"] == b"2025-01-02T03:04:09.000Z"
    assert h["correlation_id"] == b"corr-1" and h["traceparent"] == b"00-abc-def-01"
    assert h["id"] == b"e-1" and h["type"] == b"CaseOpened"  # original headers kept


def test_a_redriven_message_failing_again_keeps_its_first_position() -> None:
    first = DeadLetter(record=_rec(), error_class="E", reason="r", message="m", attempts=1,
                       first_failure=T0, last_failure=T0)
    headers = tuple(dead_letter_headers("c", first)) + (("dlq.redriven.at", b"2025"),)
    again = DeadLetter(record=_rec(topic="c.redrive", partition=0, offset=3, headers=headers),
                       error_class="E2", reason="r2", message="m2", attempts=5,
                       first_failure=T0, last_failure=T1)
    h2 = dead_letter_headers("c", again)
    d = dict(h2)
    assert d["dlq.original.topic"] == b"outbox.event.case" and d["dlq.original.offset"] == b"41"
    assert d["dlq.redrive.count"] == b"1" and d["dlq.error.reason"] == b"r2"
    assert sum(1 for k, _ in h2 if k == "dlq.original.topic") == 1


def test_select_by_event_id_or_first_n() -> None:
    recs = [_rec(offset=i, headers=(("id", f"e-{i}".encode()),)) for i in range(5)]
    assert [r.offset for r in select(recs, event_ids=["e-3", "e-1"])] == [1, 3]
    assert [r.offset for r in select(recs, first=2)] == [0, 1]
    assert len(select(recs)) == 5


def test_record_helpers() -> None:
    r = _rec()
    assert r.tp == ("outbox.event.case", 2)
    assert r.header("type") == "CaseOpened" and r.header("missing") is None
    assert r.published_at == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (PoisonMessageError("x", reason="bad_magic_byte"), FailureClass.POISON),
        (RetryableError("x"), FailureClass.RETRYABLE),
        (RegistryUnavailable("x"), FailureClass.RETRYABLE),
        (TimeoutError("x"), FailureClass.RETRYABLE),
        (pgerr.SerializationFailure("x"), FailureClass.RETRYABLE),
        (pgerr.DeadlockDetected("x"), FailureClass.RETRYABLE),
        (pgerr.QueryCanceled("statement timeout"), FailureClass.RETRYABLE),
        (psycopg.InterfaceError("connection is closed"), FailureClass.INFRA),
        (KeyError("bug"), FailureClass.RETRYABLE),  # unclassified: bounded, then DLQ
    ],
)
def test_failure_classes(exc: BaseException, cls: FailureClass) -> None:
    assert classify(exc) is cls


def test_reason_and_class_names() -> None:
    assert reason_of(PoisonMessageError("x", reason="unknown_schema_id")) == "unknown_schema_id"
    assert reason_of(RetryableError("x")) == "retries_exhausted"
    assert reason_of(pgerr.DeadlockDetected("x")) == "retries_exhausted:DeadlockDetected"
    assert error_class(RetryableError("x")) == "casestream.errors.RetryableError"
