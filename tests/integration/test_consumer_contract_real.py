"""The consumer scenario (tests/support/consumer_contract.py) on the real consumer runtime:
Kafka (one partition), the inbox and guard tables in PostgreSQL, the dead-letter topic. The
same scenario runs on the in-memory bus in tests/unit/test_consumer_contract_memory.py.

One message per batch: a failed fast-path batch is applied again message by message, which
would call a handler of the batch's other messages twice (rolled back, not recorded in the
database, but seen by the scenario's in-process recorder).
"""

from __future__ import annotations

from typing import Any

import pytest

from casestream.consumer import ConsumerSettings
from casestream.events import Envelope
from casestream.retry import RetryPolicy
from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.consumer_contract import GAP_HOLD_S, MAX_ATTEMPTS, Calls, registry, run_scenario


class RuntimeDriver:
    def __init__(self, env: Harness) -> None:
        self.env, self.calls = env, Calls()
        create_topic(env.bootstrap, env.topic, 1)
        settings = ConsumerSettings(
            batch_size=1, poll_timeout_s=0.1, sweep_interval_s=0.2, gap_hold_s=GAP_HOLD_S,
            retry=RetryPolicy(max_attempts=MAX_ATTEMPTS, initial_delay_s=0.05, max_delay_s=0.1))
        env.start(env.runtime(settings, registry(self.calls)))

    def deliver(self, events: list[Envelope]) -> None:
        produce_events(self.env.bootstrap, self.env.topic, self.env.codec, events)

    def expire_gaps(self) -> None:
        return None  # the runtime's sweep parks on the wall clock; settled() waits for it

    def settled(self, calls: int, dead_letters: int) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
        records = self.env.dead_letters(dead_letters, timeout_s=GAP_HOLD_S + 20)
        wait_until(lambda: len(self.calls.done) >= calls, 20)
        return list(self.calls.done), [(r.header("id") or "", r.header("dlq.error.reason") or "")
                                       for r in records]

    def last_version(self, aggregate_id: str) -> int | None:
        found = self.env.guard(aggregate_id)
        return None if found is None else found[1]


def test_consumer_scenario_on_the_runtime(consumer_harness: Any) -> None:
    run_scenario(RuntimeDriver(consumer_harness()))
