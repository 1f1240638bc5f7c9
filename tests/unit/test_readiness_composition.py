"""Readiness means "can take commands": ``/readyz`` holds the database and outbox checks; Kafka,
the registry and the consumers answer at ``/readyz/consumers`` and never gate ``/readyz``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from casestream.handlers import HandlerRegistry
from casestream.service import consumer_ready
from casestream.service.process import health_routes
from tests.unit.test_consumer_group_unit import _builder


class Conn:
    def __init__(self, row: tuple[Any, ...]):
        self.row = row
        self.sql: list[str] = []

    def execute(self, sql: str) -> Conn:
        self.sql.append(sql)
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return self.row


class Pool:  # what the readiness checks and the retention job read of a ConnectionPool
    conninfo = "postgresql://postgres@127.0.0.1:1/probe"
    max_size = 10

    def __init__(self, row: tuple[Any, ...] = (True, False, "off")):
        self.conn = Conn(row)

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Conn]:
        yield self.conn


class Stuck:  # a consumer without an assignment
    ready = threading.Event()

    def stalled(self) -> str | None:
        return None


def _process(pool: Pool) -> Any:
    b = _builder(pool, CASESTREAM_KAFKA_BOOTSTRAP="127.0.0.1:1", gc_freeze=False)
    b.consumer("audit.journal", ["outbox.event.case"], HandlerRegistry())
    b.ready("projection", consumer_ready(Stuck()))
    b.ready("smtp", lambda: None)
    return b.build(app=Starlette(), ready_table="journal")


def test_consumer_kafka_and_registry_checks_do_not_gate_commands() -> None:
    proc = _process(Pool())
    assert set(proc.readiness) == {"postgres", "outbox", "smtp"}
    assert set(proc.consumption) == {"kafka", "registry", "audit.journal", "projection"}


def test_a_check_can_be_filed_explicitly_and_moves_when_replaced() -> None:
    b = _builder(Pool(), gc_freeze=False)
    b.ready("cache", lambda: None, consumption=True)
    b.ready("cache", lambda: None)  # replaced: now a readiness check, and only that
    proc = b.build(app=Starlette(), ready_table="t", kafka=False)
    assert "cache" in proc.readiness and "cache" not in proc.consumption


def _client(readiness: dict[str, Any], consumption: dict[str, Any]) -> TestClient:
    return TestClient(Starlette(routes=health_routes(readiness, consumption)))


def _down() -> None:
    raise RuntimeError("kafka 127.0.0.1:1: no brokers")


def test_readyz_answers_200_while_the_consumption_signal_is_503() -> None:
    pool = Pool()
    proc = _process(pool)
    client = _client(dict(proc.readiness), {**proc.consumption, "kafka": _down})
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json()
    consumers = client.get("/readyz/consumers")
    assert consumers.status_code == 503
    failing = consumers.json()["failing"]
    assert failing["kafka"] == "RuntimeError: kafka 127.0.0.1:1: no brokers"
    assert failing["projection"] == "RuntimeError: consumer has no partition assignment yet"
    assert "smtp" not in failing and "postgres" not in failing


@pytest.mark.parametrize(("row", "reason"), [
    ((True, True, "on"), "outbox: the database is read-only (a standby)"),
    ((True, False, "on"), "outbox: the database is read-only"),
    ((False, False, "off"), "outbox: no INSERT privilege on table outbox"),
])
def test_readyz_fails_when_the_outbox_cannot_take_a_row(row: tuple[Any, ...], reason: str) -> None:
    proc = _process(Pool(row))
    r = _client(dict(proc.readiness), {}).get("/readyz")
    assert r.status_code == 503
    assert r.json()["failing"] == {"outbox": f"RuntimeError: {reason}"}

