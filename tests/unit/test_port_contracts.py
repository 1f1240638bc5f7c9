"""The platform's port contracts (casestream.testing.contracts) on the in-memory adapters:
``InMemoryRegistry``, ``MemoryDeadLetters``, ``MemorySink``. The same bodies run on the real
adapters in tests/integration/test_port_contracts_real.py."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from casestream.consumer import MemoryDeadLetters, Record
from casestream.events import Envelope, InMemoryRegistry
from casestream.outbox import MemorySink
from casestream.testing.contracts import (
    DEAD_LETTER_CONTRACT,
    OUTBOX_SINK_CONTRACT,
    REGISTRY_CONTRACT,
    raises,
)
from tests.support.events import case_returned


class MemoryRegistryBackend:
    def __init__(self) -> None:
        self.registry = InMemoryRegistry()
        self._n = itertools.count()

    def subject(self, name: str) -> str:
        return f"contract{next(self._n)}.{name}"

    def same_schema(self, a: Any, b: Any) -> bool:
        return bool(a == b)


class MemoryDeadLetterBackend:
    topic = "contract.events"

    def __init__(self) -> None:
        self._sink = MemoryDeadLetters()

    def sink(self) -> MemoryDeadLetters:
        return self._sink

    def delivered(self) -> list[Record]:
        return [dl.record for dl in self._sink.sent]


class MemorySinkBackend:
    """A unit of work appends to a scratch sink; its events join ``committed`` on a clean exit."""

    def __init__(self) -> None:
        self.committed: list[Envelope] = []

    @contextmanager
    def transaction(self) -> Iterator[MemorySink]:
        sink = MemorySink()
        yield sink
        self.committed.extend(sink.events)

    def stored(self) -> list[Envelope]:
        return list(self.committed)

    def event(self, aggregate_id: str, version: int) -> Envelope:
        return case_returned(aggregate_id, version)


@pytest.mark.parametrize("body", REGISTRY_CONTRACT, ids=lambda f: f.__name__)
def test_registry_contract_in_memory(body: Callable[[MemoryRegistryBackend], None]) -> None:
    body(MemoryRegistryBackend())


@pytest.mark.parametrize("body", DEAD_LETTER_CONTRACT, ids=lambda f: f.__name__)
def test_dead_letter_contract_in_memory(body: Callable[[MemoryDeadLetterBackend], None]) -> None:
    body(MemoryDeadLetterBackend())


@pytest.mark.parametrize("body", OUTBOX_SINK_CONTRACT, ids=lambda f: f.__name__)
def test_outbox_sink_contract_in_memory(body: Callable[[MemorySinkBackend], None]) -> None:
    body(MemorySinkBackend())


def test_raises_fails_when_nothing_is_raised() -> None:
    with pytest.raises(AssertionError, match="expected KeyError"):
        with raises(KeyError):
            pass
    with raises(LookupError):
        raise KeyError("a subclass counts")
