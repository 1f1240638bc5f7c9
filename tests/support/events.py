"""Suite events for tests that run the consumer on the suite's catalog (the harness's codec):
``case_returned`` is :func:`casestream.testing.make_event` of ``CaseReturned`` v1 {reason}."""

from __future__ import annotations

from typing import Any

from casestream.events import Envelope
from casestream.testing import make_event


def case_returned(aggregate_id: str, version: int, **kw: Any) -> Envelope:
    """A ``CaseReturned`` event of case ``aggregate_id`` at ``version`` (``make_event``'s
    other arguments as keywords)."""
    return make_event(aggregate_id, version, event_type="CaseReturned", **kw)
