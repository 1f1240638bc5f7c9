"""The key of a message's durable retry row, and which delivery a row belongs to."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from casestream.consumer.records import Record
from casestream.consumer.retries import RetryState, retry_key

REC = Record(topic="t", partition=2, offset=7, key=b"k", value=b"v", headers=(("id", b"h-1"),))


def test_the_key_is_the_event_id_else_the_id_header_else_the_position() -> None:
    assert retry_key(REC, SimpleNamespace(event_id="e-1")) == "e-1"
    assert retry_key(REC) == "h-1"
    assert retry_key(REC._replace(headers=())) == "@t/2/7"


def test_a_row_belongs_to_the_delivery_that_failed_not_to_a_re_drive() -> None:
    now = datetime.now(timezone.utc)
    row = RetryState(attempts=3, first_failure=now, last_failure=now, wait_s=0.0,
                     dead_lettered=True, position=("t", 2, 7), error_class="x", reason="r",
                     message="m")
    assert row.same_delivery(REC)
    assert not row.same_delivery(REC._replace(topic="c.redrive", offset=0))
