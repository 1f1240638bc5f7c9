"""In-memory saga store and event sink, for unit tests of the application layer.

Mirrors :class:`services.saga.adapters.postgres.PgSagaStore` semantics (both run the contract
of tests/support/saga_store_contract.py): optimistic concurrency on ``version``, at most one
active saga per case (a second is refused: False), one saga per start event, duplicate
detection by (saga id, event id). ``claim_due`` does not lock (single thread).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from casestream.errors import ConcurrencyError
from services.saga.application.ports import HistoryRecord
from services.saga.domain.engine import HistoryEntry, SagaInstance


@dataclass(slots=True)
class MemorySagaStore:
    """Dict-backed :class:`~services.saga.application.ports.SagaStore` and ``SagaQueries``."""

    sagas: dict[str, SagaInstance] = field(default_factory=dict)
    active: dict[str, bool] = field(default_factory=dict)
    started_by: dict[str, str] = field(default_factory=dict)  # start event id -> saga id
    order: list[str] = field(default_factory=list)  # saga ids, oldest first
    histories: dict[str, list[HistoryEntry]] = field(default_factory=dict)

    def get(self, saga_id: str) -> SagaInstance | None:
        return self.sagas.get(saga_id)

    def newest_for_case(self, case_id: str) -> SagaInstance | None:
        for saga_id in reversed(self.order):
            if self.sagas[saga_id].case_id == case_id:
                return self.sagas[saga_id]
        return None

    def active_for_case(self, case_id: str) -> SagaInstance | None:
        for saga_id in reversed(self.order):
            if self.sagas[saga_id].case_id == case_id and self.active[saga_id]:
                return self.sagas[saga_id]
        return None

    def insert(self, saga: SagaInstance, *, started_by: str, active: bool) -> bool:
        # PostgreSQL's INSERT ... ON CONFLICT DO NOTHING: a second active saga of a case
        # (unique index saga_active_case_uq) is refused like a duplicate start
        if (saga.saga_id in self.sagas or started_by in self.started_by
                or (active and self.active_for_case(saga.case_id) is not None)):
            return False
        self.sagas[saga.saga_id] = saga
        self.active[saga.saga_id] = active
        self.started_by[started_by] = saga.saga_id
        self.order.append(saga.saga_id)
        self.histories[saga.saga_id] = []
        return True

    def update(self, saga: SagaInstance, *, expected_version: int, active: bool) -> None:
        current = self.sagas.get(saga.saga_id)
        if current is None or current.version != expected_version:
            raise ConcurrencyError("saga", saga.saga_id, expected_version,
                                   None if current is None else current.version)
        self.sagas[saga.saga_id] = saga
        self.active[saga.saga_id] = active

    def seen(self, saga_id: str, event_id: str) -> bool:
        return any(e.event_id == event_id for e in self.histories.get(saga_id, ()))

    def record(self, saga_id: str, entry: HistoryEntry) -> None:
        self.histories.setdefault(saga_id, []).append(entry)

    def claim_due(self, now: datetime, limit: int) -> list[SagaInstance]:
        due = [s for s in self.sagas.values() if s.deadline_at is not None and s.deadline_at <= now]
        due.sort(key=lambda s: s.deadline_at or now)
        return due[:limit]

    # -- SagaQueries -----------------------------------------------------------------
    def history(self, saga_id: str) -> list[HistoryRecord]:
        return [HistoryRecord(seq=i + 1, entry=e) for i, e in enumerate(self.histories.get(saga_id, ()))]

    def list(self, *, tenant_id: str | None, state: str | None, case_id: str | None,
             limit: int) -> list[SagaInstance]:
        out = [self.sagas[i] for i in reversed(self.order)]
        out = [s for s in out if (tenant_id is None or s.tenant_id == tenant_id)
               and (state is None or s.state == state)
               and (case_id is None or s.case_id == case_id)]
        return out[:limit]

    def stuck(self, *, tenant_id: str | None, states: Collection[str], older_than: datetime,
              limit: int) -> list[SagaInstance]:
        """Deadline criterion only (the memory store keeps no change times)."""
        out = [s for s in self.sagas.values() if self.active[s.saga_id] and s.state in states
               and (tenant_id is None or s.tenant_id == tenant_id)
               and s.deadline_at is not None and s.deadline_at < older_than]
        out.sort(key=lambda s: s.deadline_at or older_than)
        return out[:limit]

    def count_by_state(self, *, tenant_id: str | None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.sagas.values():
            if tenant_id is None or s.tenant_id == tenant_id:
                counts[s.state] = counts.get(s.state, 0) + 1
        return counts

