"""The saga store contract (tests/support/saga_store_contract.py) on ``MemorySagaStore``.

The unit of work is a snapshot of the store taken when it begins and put back when its block
raises (the memory store has no transactions of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from services.saga.adapters.memory import MemorySagaStore
from tests.support.saga_store_contract import CONTRACT


class MemoryBackend:
    def __init__(self) -> None:
        self.store = MemorySagaStore()

    @contextmanager
    def transaction(self) -> Iterator[MemorySagaStore]:
        s = self.store  # sagas are immutable values: copying the containers is a snapshot
        before = MemorySagaStore(sagas=dict(s.sagas), active=dict(s.active),
                                 started_by=dict(s.started_by), order=list(s.order),
                                 histories={k: list(v) for k, v in s.histories.items()})
        try:
            yield self.store
        except BaseException:
            self.store = before
            raise


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_saga_store_contract_in_memory(body: Callable[[MemoryBackend], None]) -> None:
    body(MemoryBackend())
