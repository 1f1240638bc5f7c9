"""Notification domain: Message-ID, undeliverable recipients, the mail, the retry policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.notification.domain import (
    Notice,
    NoticeStatus,
    compose,
    message_id_for,
    undeliverable_reason,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def notice(**kw: object) -> Notice:
    base = dict(case_id="case-1", saga_id="saga-1", tenant_id="t1", correlation_id="case-1",
                request_event_id="req-1", recipient_email="owner@example.org",
                penalty_cents=400_000, violation_code="REG-4",
                message_id=message_id_for("case-1"), status=NoticeStatus.PENDING, attempts=0,
                next_attempt_at=T0, created_at=T0)
    base.update(kw)
    return Notice(**base)  # type: ignore[arg-type]


def test_message_id_is_deterministic_per_case_and_rfc5322_shaped() -> None:
    assert message_id_for("case-1") == message_id_for("case-1") == "<case-1@notice.casestream>"
    assert message_id_for("case-1") != message_id_for("case-2")


@pytest.mark.parametrize("email,undeliverable", [
    ("owner@example.org", False),
    ("someone@fail.invalid", True),
    ("SOMEONE@FAIL.INVALID", True),
    ("someone@notfail.invalid", False),  # only the documented domain
    ("no-at-sign", True),
])
def test_undeliverable_recipients(email: str, undeliverable: bool) -> None:
    assert (undeliverable_reason(email) is not None) is undeliverable


def test_composed_mail_carries_identity_amount_and_recipient() -> None:
    msg = compose(notice(), date=T0)
    assert msg["Message-ID"] == "<case-1@notice.casestream>"
    assert msg["To"] == "owner@example.org"
    assert msg["X-Casestream-Case-Id"] == "case-1"
    assert "REG-4" in msg["Subject"]
    body = msg.get_content()
    assert "EUR 4,000.00" in body and "400000 cents" in body


def test_composing_twice_gives_the_same_message_id() -> None:
    a = compose(notice(), date=T0)
    b = compose(notice(attempts=3), date=T0 + timedelta(minutes=5))
    assert a["Message-ID"] == b["Message-ID"]
