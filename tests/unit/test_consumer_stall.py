"""Stall watchdog of the consumer loop and the end of a worker thread, without Kafka.

The loop's phase is backdated instead of waited for (no timed assertions)."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from casestream.consumer import ConsumerGroup, ConsumerRuntime, ConsumerSettings
from casestream.handlers.registry import HandlerRegistry
from casestream.errors import ConfigError
from casestream.service.builder import consumer_ready
from casestream.service.process import ServiceProcess

CONF = {"bootstrap.servers": "127.0.0.1:1"}


def _runtime(stall_after_s: float = 60.0) -> ConsumerRuntime:
    return ConsumerRuntime("unit.stall", ["t"], HandlerRegistry(), object(), object(), CONF,
                           ConsumerSettings(stall_after_s=stall_after_s))


def _stuck(rt: ConsumerRuntime, phase: str, seconds: float) -> None:
    rt._phase = (phase, time.monotonic() - seconds)


def test_a_step_older_than_stall_after_s_is_a_stall_naming_the_step() -> None:
    rt = _runtime(60.0)
    _stuck(rt, "committing offsets", 59.0)
    assert rt.stalled() is None
    _stuck(rt, "committing offsets", 131.0)
    assert rt.stalled() == "committing offsets for 131 s"
    rt._enter("polling")
    assert rt.stalled() is None


def test_a_stall_is_logged_once_at_error_then_its_end_at_warning(caplog) -> None:
    rt = _runtime(60.0)
    rt._assigned = {("t", 1), ("t", 0)}
    rt._paused = {("t", 1): 0.0}
    _stuck(rt, "waiting for the batch in the database", 90.0)
    with caplog.at_level(logging.INFO, logger="casestream.consumer"):
        rt._check_stall()
        rt._check_stall()
        rt._enter("polling")
        rt._check_stall()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["unit.stall: consumer stalled: waiting for the batch in the database for "
                      "90 s (assigned t[0], t[1]; paused t[1]); its partitions make no progress "
                      "until this step returns"]
    assert rt.stats.stalls == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "unit.stall: consumer stall over (now polling)"]


def test_stopping_is_not_a_stall() -> None:
    rt = _runtime(1.0)
    _stuck(rt, "stopping", 100.0)
    assert rt.stalled() is None


def test_stall_after_s_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="durations must be positive"):
        ConsumerSettings(stall_after_s=0)


def test_readiness_fails_while_the_consumer_is_stalled() -> None:
    rt = _runtime(60.0)
    check = consumer_ready(rt)
    rt.ready.set()
    check()
    _stuck(rt, "committing offsets", 200.0)
    with pytest.raises(RuntimeError, match="consumer stalled: committing offsets for 200 s"):
        check()


def test_a_group_is_stalled_when_one_member_is() -> None:
    g = ConsumerGroup(2, "unit.stall", ["t"], HandlerRegistry(), object(), object(), CONF,
                      ConsumerSettings(stall_after_s=60.0))
    assert g.stalled() is None
    _stuck(g.members[1], "polling", 75.0)
    assert g.stalled() == "unit.stall#1: polling for 75 s"


def _process() -> tuple[ServiceProcess, SimpleNamespace]:
    from starlette.applications import Starlette

    return (ServiceProcess(name="t", app=Starlette(), host="127.0.0.1", port=0),
            SimpleNamespace(should_exit=False))


def test_a_worker_returning_before_it_was_stopped_stops_the_process_as_failed(caplog) -> None:
    process, server = _process()
    with caplog.at_level(logging.ERROR, logger="casestream.service"):
        process._guard("consumer", lambda stop: None, server)  # type: ignore[arg-type]
    assert process._failed == ["consumer"] and process.stop.is_set() and server.should_exit
    assert "worker consumer returned without being stopped" in caplog.text


def test_a_worker_returning_after_stop_is_a_clean_end() -> None:
    process, server = _process()
    process.stop.set()
    process._guard("consumer", lambda stop: None, server)  # type: ignore[arg-type]
    assert process._failed == [] and not server.should_exit


def test_a_worker_ending_with_a_base_exception_stops_the_process_as_failed() -> None:
    process, server = _process()

    def worker(stop: threading.Event) -> None:
        raise SystemExit(3)

    process._guard("relay", worker, server)  # type: ignore[arg-type]
    assert process._failed == ["relay"] and server.should_exit


class _FakeConsumer:
    """Records ``commit`` calls; answers synchronous ones with success."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, int, int]], bool]] = []

    def commit(self, *, offsets: list, asynchronous: bool) -> list | None:
        self.calls.append(([(tp.topic, tp.partition, tp.offset) for tp in offsets], asynchronous))
        return None if asynchronous else offsets


def test_the_loop_commits_asynchronously_one_at_a_time_and_keeps_offsets_until_answered() -> None:
    from confluent_kafka import KafkaError, TopicPartition

    rt = _runtime()
    rt._consumer = fake = _FakeConsumer()
    rt._pending = {("t", 0): 5}
    rt._commit_pending()
    rt._pending[("t", 1)] = 7
    rt._commit_pending()  # the first is unanswered: nothing sent
    assert fake.calls == [([("t", 0, 5)], True)]
    rt._on_commit(KafkaError(KafkaError._WAIT_COORD), [])
    assert rt._pending == {("t", 0): 5, ("t", 1): 7} and rt.stats.offset_commit_failures == 1
    rt._commit_pending()
    assert fake.calls[-1] == ([("t", 0, 5), ("t", 1, 7)], True)
    rt._on_commit(None, [TopicPartition("t", 0, 5), TopicPartition("t", 1, 7)])
    assert rt._pending == {} and rt.stats.offset_commits == 1


def test_revoke_and_shutdown_commit_synchronously() -> None:
    rt = _runtime()
    rt._consumer = fake = _FakeConsumer()
    rt._pending = {("t", 0): 5}
    rt._commit_pending()
    rt._pending[("t", 0)] = 9
    rt._commit_pending(wait=True)  # even with an asynchronous one in flight
    assert fake.calls == [([("t", 0, 5)], True), ([("t", 0, 9)], False)]
    assert rt._pending == {}
