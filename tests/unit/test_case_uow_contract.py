"""The case unit-of-work contract (tests/support/case_uow_contract.py) on ``InMemoryUnitOfWork``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from casestream.events import Envelope
from services.case.adapters.memory import InMemoryStore, InMemoryUnitOfWork
from tests.support.case_uow_contract import CONTRACT


class MemoryBackend:
    def __init__(self) -> None:
        self.store = InMemoryStore()

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.store)

    def outbox(self) -> list[Envelope]:
        return list(self.store.outbox)


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_case_uow_contract_in_memory(body: Callable[[MemoryBackend], None]) -> None:
    body(MemoryBackend())
