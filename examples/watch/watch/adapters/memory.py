"""In-memory adapters for tests: a repository that is its own unit of work, and a clock
(the in-memory event sink is the library's ``casestream.outbox.MemorySink``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from casestream.http import InMemoryIdempotencyStore
from watch.domain import CaseView, Watch


@dataclass
class MemoryWatchRepository:
    """Cases by id, watches by (tenant, case, watcher). Also the unit of work: ``with repo()``
    yields itself and keeps nothing of a block that raised."""

    cases: dict[str, CaseView] = field(default_factory=dict)
    watches: dict[tuple[str, str, str], Watch] = field(default_factory=dict)
    keys: InMemoryIdempotencyStore = field(default_factory=InMemoryIdempotencyStore)
    idempotency: Any = field(default=None, repr=False)
    """The Idempotency-Key records' transaction of the current ``with repo()`` block."""

    def case(self, tenant_id: str, case_id: str) -> CaseView | None:
        view = self.cases.get(case_id)
        return view if view is not None and view.tenant_id == tenant_id else None

    def watches_of(self, tenant_id: str, case_id: str) -> list[Watch]:
        return sorted((w for (t, c, _), w in self.watches.items()
                       if (t, c) == (tenant_id, case_id)), key=lambda w: w.watcher_id)

    def add_watch(self, watch: Watch) -> tuple[Watch, bool]:
        key = (watch.tenant_id, watch.case_id, watch.watcher_id)
        if key in self.watches:
            return self.watches[key], False
        self.watches[key] = watch
        return watch, True

    def save_watch(self, watch: Watch) -> None:
        self.watches[(watch.tenant_id, watch.case_id, watch.watcher_id)] = watch

    @contextmanager
    def __call__(self) -> Iterator[MemoryWatchRepository]:
        cases, watches = dict(self.cases), dict(self.watches)
        with self.keys.transaction() as self.idempotency:
            try:
                yield self
            except BaseException:
                self.cases, self.watches = cases, watches
                raise


@dataclass
class FixedClock:
    """A clock standing still at ``at`` (UTC)."""

    at: datetime = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at
