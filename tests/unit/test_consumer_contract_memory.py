"""The consumer scenario (tests/support/consumer_contract.py) on the in-memory bus; the same
scenario runs on the real consumer runtime in tests/integration/test_consumer_contract_real.py."""

from __future__ import annotations

import pytest

from casestream.events import Envelope
from casestream.testing import MemoryBus
from tests.support.consumer_contract import GAP_HOLD_S, MAX_ATTEMPTS, Calls, registry, run_scenario


class BusDriver:
    def __init__(self) -> None:
        self.calls = Calls()
        self.bus = MemoryBus(registry(self.calls), max_attempts=MAX_ATTEMPTS, gap_hold_s=GAP_HOLD_S)

    def deliver(self, events: list[Envelope]) -> None:
        self.bus.publish(*events)

    def expire_gaps(self) -> None:
        self.bus.clock.advance(seconds=GAP_HOLD_S)
        self.bus.park_expired()

    def settled(self, calls: int, dead_letters: int) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
        return list(self.calls.done), self.bus.dead_lettered

    def last_version(self, aggregate_id: str) -> int | None:
        return self.bus.last_version("case", aggregate_id)


def test_consumer_scenario_on_the_memory_bus() -> None:
    run_scenario(BusDriver())
