"""The case service over in-memory adapters, for tests of its HTTP edge."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from collections.abc import Callable
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


def assert_reads_but_cannot_write(http: Any, case_id: str, headers: dict[str, str],
                                  body: dict[str, Any], problem: Callable[..., Any]) -> None:
    """A caller with ``headers`` reads case ``case_id`` but may neither open a case (with
    ``body``) nor submit one: 403 ``forbidden`` (``insufficient_scope``), checked by
    ``problem(response, status, code)``. ``http``: an httpx or starlette test client."""
    assert http.get(f"/cases/{case_id}", headers=headers).status_code == 200
    denied = http.post("/cases", json=body, headers=headers)
    problem(denied, 403, "forbidden")
    assert 'error="insufficient_scope"' in denied.headers["www-authenticate"]
    problem(http.post(f"/cases/{case_id}/submit", json={},
                      headers={**headers, "Idempotency-Key": "k"}), 403, "forbidden")
