"""In-memory adapters of the case ports, for unit tests and local experiments.

:class:`InMemoryStore` holds committed state; each :class:`InMemoryUnitOfWork` stages its
writes and applies them on a clean exit (rolled back = discarded), checking aggregate
versions against committed state like the PostgreSQL adapter's ``WHERE version = ...``.
Idempotency records live in the platform's ``InMemoryIdempotencyStore`` (keys held per unit
of work until it ends, like transaction-scoped advisory locks). Not thread-safe otherwise:
one unit of work at a time per thread of a test.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType

from casestream.events import Envelope
from casestream.errors import ConcurrencyError
from casestream.http import IdempotencyRecord, IdempotencyScope, InMemoryIdempotencyStore

from services.case.application.commands import CaseQuery, EvidenceView
from services.case.domain.case import Case


@dataclass(slots=True)
class InMemoryStore:
    """Committed state: cases by id, idempotency records by scope, outbox in append order."""

    cases: dict[str, Case] = field(default_factory=dict)
    idempotency: InMemoryIdempotencyStore = field(default_factory=InMemoryIdempotencyStore)
    outbox: list[Envelope] = field(default_factory=list)
    evidence: dict[str, tuple[EvidenceView, str, bytes]] = field(default_factory=dict)
    commits: int = 0

    @property
    def records(self) -> dict[IdempotencyScope, IdempotencyRecord]:
        """The committed idempotency records by scope."""
        return self.idempotency.records


class _Cases:
    def __init__(self, store: InMemoryStore, staged: dict[str, Case]) -> None:
        self._store, self._staged = store, staged

    def get(self, tenant_id: str, case_id: str) -> Case | None:
        case = self._staged.get(case_id) or self._store.cases.get(case_id)
        if case is None or case.tenant_id != tenant_id:
            return None
        loaded = copy.deepcopy(case)
        loaded.loaded_version = loaded.version
        return loaded

    def add(self, case: Case) -> None:
        existing = self._staged.get(case.id) or self._store.cases.get(case.id)
        if existing is not None:
            raise ConcurrencyError("case", case.id, 0, existing.version)
        self._staged[case.id] = self._snapshot(case)

    def update(self, case: Case) -> None:
        current = self._staged.get(case.id) or self._store.cases.get(case.id)
        actual = current.version if current else None
        if actual != case.loaded_version:
            raise ConcurrencyError("case", case.id, case.loaded_version, actual)
        self._staged[case.id] = self._snapshot(case)

    def search(self, query: CaseQuery) -> list[Case]:
        merged = {**self._store.cases, **self._staged}
        found = sorted((c for c in merged.values() if matches(c, query)),
                       key=lambda c: (c.opened_at, c.id))
        return [copy.deepcopy(c) for c in found[:query.limit]]

    def evidence_deadlines_due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        due = [c for c in {**self._store.cases, **self._staged}.values()
               if c.status.value == "awaiting_evidence" and (
                   (c.evidence_status == "requested" and c.evidence_due_at is not None
                    and c.evidence_due_at <= now)
                   or (c.evidence_status == "overdue" and c.evidence_escalate_at is not None
                       and c.evidence_escalate_at <= now))]
        due.sort(key=lambda c: c.evidence_due_at or now)
        return [(c.tenant_id, c.id) for c in due[:limit]]

    @staticmethod
    def _snapshot(case: Case) -> Case:
        stored = copy.deepcopy(case)
        stored.pull_events()
        return stored


def matches(case: Case, q: CaseQuery) -> bool:
    """True when ``case`` passes every filter of ``q`` and lies after its keyset cursor."""
    return (case.tenant_id == q.tenant_id
            and (q.status is None or case.status.value == q.status)
            and (q.officer_id is None or case.officer_id == q.officer_id)
            and (q.severity is None or case.content.severity == q.severity)
            and (q.opened_from is None or case.opened_at >= q.opened_from)
            and (q.opened_to is None or case.opened_at < q.opened_to)
            and (q.after is None or (case.opened_at, case.id) > q.after))


class _Evidence:
    def __init__(self, store: InMemoryStore, staged: dict[str, tuple[EvidenceView, str, bytes]]
                 ) -> None:
        self._store, self._staged = store, staged

    def add(self, item: EvidenceView, content: bytes) -> None:
        self._staged[item.id] = (item, item.case_id, content)

    def _items(self, case_id: str) -> list[tuple[EvidenceView, str, bytes]]:
        merged = {**self._store.evidence, **self._staged}
        return [v for v in merged.values() if v[1] == case_id]

    def list(self, tenant_id: str, case_id: str) -> list[EvidenceView]:
        return sorted((v[0] for v in self._items(case_id)), key=lambda e: (e.submitted_at, e.id))

    def content(self, tenant_id: str, case_id: str, evidence_id: str) -> bytes | None:
        return next((v[2] for v in self._items(case_id) if v[0].id == evidence_id), None)


class _Outbox:
    def __init__(self, staged: list[Envelope]) -> None:
        self._staged = staged

    def append(self, events: Sequence[Envelope]) -> None:
        self._staged.extend(events)


class InMemoryUnitOfWork:
    """One staged transaction over an :class:`InMemoryStore`; commits on a clean exit."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store
        self._staged_cases: dict[str, Case] = {}
        self._staged_outbox: list[Envelope] = []
        self._staged_evidence: dict[str, tuple[EvidenceView, str, bytes]] = {}
        self.evidence = _Evidence(store, self._staged_evidence)
        self.cases = _Cases(store, self._staged_cases)
        self.idempotency = store.idempotency.begin()
        self.outbox = _Outbox(self._staged_outbox)

    def __enter__(self) -> InMemoryUnitOfWork:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.idempotency.rollback()  # releases the keys; a no-op after the commit

    def commit(self) -> None:
        """Apply staged writes to the store (also what a clean ``with`` exit does)."""
        self.idempotency.commit()  # first: a refused record applies nothing
        self._store.cases.update(self._staged_cases)
        self._store.outbox.extend(self._staged_outbox)
        self._store.evidence.update(self._staged_evidence)
        self._staged_evidence.clear()
        self._store.commits += 1
        self._staged_cases.clear()
        self._staged_outbox.clear()
