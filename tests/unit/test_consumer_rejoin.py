"""The rejoin guard of the consumer runtime, without Kafka: a runtime left without an
assignment past ``rejoin_timeout_s`` replaces its Kafka client.

Waits are backdated instead of slept through (no timed assertions). ``confluent_kafka.Consumer``
is replaced by an in-memory client class that records its config, subscription and close, so
the runtime's own ``_new_consumer`` runs."""

from __future__ import annotations

import logging
import math
import threading
import time
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.consumer import runtime as runtime_module
from casestream.handlers.registry import HandlerRegistry
from casestream.errors import ConfigError

CONF = {"bootstrap.servers": "127.0.0.1:1"}


class FakeClient:
    """Stands in for ``confluent_kafka.Consumer``: records the config, the subscription and
    close(); ``hang`` (class attribute) makes close() block until that event is set."""

    made: list[FakeClient] = []
    hang: threading.Event | None = None

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.closed = False
        self.subscribed: tuple[list[str], dict[str, Any]] | None = None
        FakeClient.made.append(self)

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed = (topics, callbacks)

    def close(self) -> None:
        if FakeClient.hang is not None:
            FakeClient.hang.wait(30)
        self.closed = True

    def pause(self, partitions: Any) -> None:
        pass

    def resume(self, partitions: Any) -> None:
        pass

    def seek(self, partition: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeClient.made = []
    FakeClient.hang = None
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeClient)


def _tp(topic: str, partition: int) -> Any:
    return SimpleNamespace(topic=topic, partition=partition, offset=0, error=None)


def _runtime(conf: dict[str, Any] | None = None, **settings: Any) -> ConsumerRuntime:
    return ConsumerRuntime("unit.rejoin", ["t"], HandlerRegistry(), object(), object(),
                           {**CONF, **(conf or {})}, ConsumerSettings(**settings))


def _subscribed(rt: ConsumerRuntime, waited_s: float) -> FakeClient:
    """Give ``rt`` its client the way ``run`` does; it has waited ``waited_s`` already."""
    rt._consumer = rt._new_consumer()
    rt._unassigned_since = time.monotonic() - waited_s
    return rt._consumer


def test_the_default_bound_is_max_poll_interval_plus_session_timeout() -> None:
    assert _runtime().rejoin_after_s == 345.0
    assert _runtime({"session.timeout.ms": 6000, "max.poll.interval.ms": 60000}).rejoin_after_s == 66.0
    assert _runtime({"session.timeout.ms": 6000}, rejoin_timeout_s=40.0).rejoin_after_s == 40.0


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_rejoin_timeout_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(ConfigError, match="durations must be positive"):
        ConsumerSettings(rejoin_timeout_s=bad)


def test_a_new_client_is_subscribed_with_the_callbacks_and_starts_the_wait() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    before = time.monotonic()
    client = rt._new_consumer()
    topics, callbacks = client.subscribed  # type: ignore[misc]
    assert topics == ["t", "unit.rejoin.redrive"]
    assert set(callbacks) == {"on_assign", "on_revoke", "on_lost"}
    assert callable(client.conf["on_commit"]) and client.conf["group.id"] == "unit.rejoin"
    assert rt._unassigned_since is not None and rt._unassigned_since >= before


def test_waiting_counts_from_the_loss_until_any_assignment_even_an_empty_one() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    client = _subscribed(rt, 0.0)
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
    old = _subscribed(rt, 31.0)
    rt._pending = {("t", 0): 17}  # cannot be committed by the new client: nothing assigned
    rt._commit_sent = time.monotonic()
    generation = rt._generation
    with caplog.at_level(logging.ERROR, logger="casestream.consumer"):
        rt._replace_consumer(rt.rejoin_overdue())  # type: ignore[arg-type]
    assert old.closed and FakeClient.made == [old, rt._consumer]
    assert rt._consumer.subscribed is not None
    assert rt.stats.consumer_restarts == 1 and rt._generation == generation + 1
    assert rt._pending == {} and rt._commit_sent is None
    assert rt.rejoin_overdue() is None  # the new client's wait has just begun
    [message] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert message.startswith("unit.rejoin: no partition assignment 31 s after subscribing or "
                              "losing partitions (rejoin_timeout_s 30); closing the Kafka "
                              "consumer and joining group unit.rejoin with a new one")


def test_late_callbacks_and_commit_answers_of_the_replaced_client_change_nothing() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = _subscribed(rt, 31.0)
    rt._replace_consumer(31.0)
    new = rt._consumer
    generation = rt._generation
    rt._on_assign(old, [_tp("t", 0)])
    rt._on_revoke(old, [_tp("t", 0)])
    rt._on_lost(old, [_tp("t", 0)])
    assert rt._assigned == set() and rt.stats.assignments == 0 and rt.stats.revocations == 0
    assert rt._generation == generation  # a loss would make the prefetched batch stale
    rt._pending = {("t", 0): 5}
    rt._commit_sent = sent = time.monotonic()
    old.conf["on_commit"](None, [SimpleNamespace(topic="t", partition=0, offset=5, error=None)])
    assert rt._pending == {("t", 0): 5} and rt._commit_sent == sent  # not the new client's
    new.conf["on_commit"](None, [SimpleNamespace(topic="t", partition=0, offset=5, error=None)])
    assert rt._pending == {} and rt._commit_sent is None
    assert rt._unassigned_since is not None  # still waiting for the new client's assignment
    rt._on_assign(new, [_tp("t", 0)])
    assert rt._assigned == {("t", 0)} and rt._unassigned_since is None


def test_a_client_that_does_not_close_is_left_to_its_thread(monkeypatch, caplog) -> None:
    monkeypatch.setattr(runtime_module, "_CLOSE_WAIT_S", 0.05)
    rt = _runtime(rejoin_timeout_s=30.0)
    old = _subscribed(rt, 40.0)
    FakeClient.hang = threading.Event()
    with caplog.at_level(logging.WARNING, logger="casestream.consumer"):
        rt._replace_consumer(40.0)
    try:
        assert rt._consumer is FakeClient.made[-1] and rt._consumer is not old
        assert not old.closed
        assert any("did not close within" in r.getMessage() for r in caplog.records)
    finally:
        FakeClient.hang.set()


def test_an_assignment_arriving_while_the_last_batch_finishes_keeps_the_client() -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = _subscribed(rt, 31.0)
    rewound: list[tuple[Any, int, float]] = []

    def land() -> dict[Any, int]:  # the wait polls the client: its assignment and a record come
        rt._on_assign(old, [_tp("t", 0)])
        return {("t", 0): 5}

    rt._land = land  # type: ignore[method-assign]
    rt._rewind = lambda tp, off, delay: rewound.append((tp, off, delay))  # type: ignore[method-assign]
    rt._replace_consumer(31.0)
    assert rt._consumer is old and not old.closed and FakeClient.made == [old]
    assert rt.stats.consumer_restarts == 0 and rt._assigned == {("t", 0)}
    assert rewound == [(("t", 0), 5, 0.0)]  # the record polled meanwhile is fetched again


def test_a_step_of_an_overdue_runtime_replaces_the_client_first(monkeypatch) -> None:
    rt = _runtime(rejoin_timeout_s=30.0)
    old = _subscribed(rt, 31.0)
    polled: list[Any] = []

    def fetch(consumer: Any, *_: Any) -> list[Any]:
        polled.append(consumer)
        raise KeyboardInterrupt  # end the step here: what matters is which client polled

    monkeypatch.setattr(runtime_module, "fetch_batch", fetch)
    with pytest.raises(KeyboardInterrupt):
        rt._step()
    assert polled == [FakeClient.made[-1]] and polled[0] is not old and old.closed


def test_a_key_parallel_step_replaces_the_client_first() -> None:
    rt = _runtime(rejoin_timeout_s=30.0, key_concurrency=2)
    old = _subscribed(rt, 31.0)
    stepped: list[Any] = []
    rt._workers = object()  # type: ignore[assignment]
    rt._step_keyed = lambda workers: stepped.append(rt._consumer)  # type: ignore[method-assign]
    rt._step()
    assert stepped == [FakeClient.made[-1]] and stepped[0] is not old and old.closed
