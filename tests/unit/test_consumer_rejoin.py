"""The rejoin guard of the consumer runtime, without Kafka: a runtime left without an
assignment past ``rejoin_timeout_s`` replaces its Kafka client.

Waits are backdated instead of slept through (no timed assertions); the Kafka clients are
in-memory stand-ins that record what the runtime asked of them."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.consumer import runtime as runtime_module
from casestream.consumer.handlers import HandlerRegistry
from casestream.errors import ConfigError

pytestmark = pytest.mark.unit

CONF = {"bootstrap.servers": "127.0.0.1:1"}


class FakeClient:
    """Records close() calls; ``hang`` makes close() block until released."""

    def __init__(self, hang: threading.Event | None = None) -> None:
        self.closed = False
        self._hang = hang

    def close(self) -> None:
        if self._hang is not None:
            self._hang.wait(30)
        self.closed = True

    def pause(self, partitions: Any) -> None:
        pass

    def resume(self, partitions: Any) -> None:
        pass


def _tp(topic: str, partition: int) -> Any:
    return SimpleNamespace(topic=topic, partition=partition)


def _runtime(conf: dict[str, Any] | None = None, **settings: Any) -> ConsumerRuntime:
    return ConsumerRuntime("unit.rejoin", ["t"], HandlerRegistry(), object(), object(),
                           {**CONF, **(conf or {})}, ConsumerSettings(**settings))


def _subscribed(rt: ConsumerRuntime, client: FakeClient, waited_s: float) -> list[FakeClient]:
    """Make ``client`` the runtime's subscribed client, waiting ``waited_s`` already; returns
    the list the runtime's replacement clients are appended to."""
    made: list[FakeClient] = []

    def new_consumer() -> FakeClient:
        made.append(FakeClient())
        rt._unassigned_since = time.monotonic()
        return made[-1]

    rt._new_consumer = new_consumer  # type: ignore[method-assign]
    rt._consumer = client
    rt._unassigned_since = time.monotonic() - waited_s
    return made


def test_the_default_bound_is_max_poll_interval_plus_session_timeout() -> None:
    assert _runtime().rejoin_after_s == 345.0
    assert _runtime({"session.timeout.ms": 6000, "max.poll.interval.ms": 60000}).rejoin_after_s == 66.0
    assert _runtime({"session.timeout.ms": 6000}, rejoin_timeout_s=40.0).rejoin_after_s == 40.0


def test_rejoin_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="durations must be positive"):
        ConsumerSettings(rejoin_timeout_s=0)


def test_waiting_counts_from_the_loss_until_any_assignment_even_an_empty_one() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    client = FakeClient()
    _subscribed(rt, client, 0.0)
    rt._on_assign(client, [_tp("t", 0)])
    assert rt._unassigned_since is None and rt.rejoin_overdue() is None
    rt._on_lost(client, [_tp("t", 0)])
    lost_at = rt._unassigned_since
    assert lost_at is not None
    assert rt.rejoin_overdue(lost_at + 29.0) is None
    assert rt.rejoin_overdue(lost_at + 31.0) == pytest.approx(31.0)
    rt._on_revoke(client, [])  # a revoke during the wait does not restart the clock
    assert rt._unassigned_since == lost_at
    rt._on_assign(client, [])  # more members than partitions: assigned nothing, still joined
    assert rt.rejoin_overdue(lost_at + 1000.0) is None


def test_an_overdue_runtime_closes_its_client_and_subscribes_a_new_one(caplog) -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = FakeClient()
    made = _subscribed(rt, old, 31.0)
    rt._pending = {("t", 0): 17}  # cannot be committed by the new client: nothing assigned
    rt._commit_sent = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="casestream.consumer"):
        rt._replace_consumer(rt.rejoin_overdue())  # type: ignore[arg-type]
    assert old.closed and len(made) == 1 and rt._consumer is made[0]
    assert rt.stats.consumer_restarts == 1
    assert rt._pending == {} and rt._commit_sent is None
    assert rt.rejoin_overdue() is None  # the new client's wait has just begun
    [message] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert message.startswith("unit.rejoin: no partition assignment 31 s after subscribing or "
                              "losing partitions (rejoin_timeout_s 30); closing the Kafka "
                              "consumer and joining group unit.rejoin with a new one")


def test_late_callbacks_of_the_replaced_client_change_nothing() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = FakeClient()
    made = _subscribed(rt, old, 31.0)
    rt._replace_consumer(31.0)
    rt._on_assign(old, [_tp("t", 0)])
    rt._on_revoke(old, [_tp("t", 0)])
    assert rt._assigned == set() and rt.stats.assignments == 0 and rt.stats.revocations == 0
    assert rt._unassigned_since is not None  # still waiting for the new client's assignment
    rt._on_assign(made[0], [_tp("t", 0)])
    assert rt._assigned == {("t", 0)} and rt._unassigned_since is None


def test_a_client_that_does_not_close_is_left_to_its_thread(monkeypatch, caplog) -> None:
    monkeypatch.setattr(runtime_module, "_CLOSE_WAIT_S", 0.05)
    rt = _runtime(rejoin_timeout_s=30.0)
    release = threading.Event()
    old = FakeClient(hang=release)
    made = _subscribed(rt, old, 40.0)
    with caplog.at_level(logging.WARNING, logger="casestream.consumer"):
        rt._replace_consumer(40.0)
    try:
        assert rt._consumer is made[0] and not old.closed
        assert any("did not close within" in r.getMessage() for r in caplog.records)
    finally:
        release.set()


def test_a_step_of_an_overdue_runtime_replaces_the_client_first(monkeypatch) -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = FakeClient()
    made = _subscribed(rt, old, 31.0)
    polled: list[Any] = []

    def fetch(consumer: Any, *_: Any) -> list[Any]:
        polled.append(consumer)
        raise KeyboardInterrupt  # end the step here: what matters is which client polled

    monkeypatch.setattr(runtime_module, "fetch_batch", fetch)
    with pytest.raises(KeyboardInterrupt):
        rt._step()
    assert polled == [made[0]] and old.closed


def test_an_assignment_arriving_while_the_last_batch_finishes_keeps_the_client() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = FakeClient()
    made = _subscribed(rt, old, 31.0)

    def land() -> dict[Any, int]:  # the wait polls the client; its assignment comes now
        rt._on_assign(old, [_tp("t", 0)])
        return {}

    rt._land = land  # type: ignore[method-assign]
    rt._replace_consumer(31.0)
    assert rt._consumer is old and not old.closed and made == []
    assert rt.stats.consumer_restarts == 0 and rt._assigned == {("t", 0)}
