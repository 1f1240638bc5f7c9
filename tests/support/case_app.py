"""The case service over in-memory adapters, for tests of its HTTP edge."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from services.case.adapters.memory import InMemoryStore, InMemoryUnitOfWork
from services.case.application import CaseService

BODY: dict[str, Any] = {"title": "Unlicensed trading", "summary": "Stall without licence",
                        "severity": 4, "evidence_count": 2,
                        "reporter_email": "inspector@example.org"}
"""A valid ``POST /cases`` body."""


class Clock:
    """Always 2025-05-01 00:00 UTC."""

    def now(self) -> datetime:
        return datetime(2025, 5, 1, tzinfo=UTC)


def memory_case_service(store: InMemoryStore) -> CaseService:
    """A :class:`CaseService` over ``store`` with :class:`Clock`, case ids
    ``UUID(int=1)``, ``UUID(int=2)``, … and idempotency records kept an hour."""
    counter = itertools.count(1)
    return CaseService(uow=lambda: InMemoryUnitOfWork(store), clock=Clock(),
                       new_id=lambda: str(uuid.UUID(int=next(counter))),
                       idempotency_ttl=timedelta(hours=1))
