"""Integration: a service whose Kafka is unreachable stays ready for commands.

The case service runs as a live process (real PostgreSQL and registry) pointed at a dead Kafka
bootstrap (``127.0.0.1:1``). Past its consumers' first attempts to create their dead-letter
topics (they wait for Kafka, the process stays up), ``/readyz`` answers 200 and a command is
accepted into the outbox (the row waits, pending, for the relay), while ``/readyz/consumers``
answers 503 naming Kafka and the consumers — the separate signal that consumption is down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from test_case_api_live import BODY, officer
from test_case_api_support import LiveService, live_service_fixture

DEAD_KAFKA = "127.0.0.1:1"
# A consumer's first topic creation gives up after 15 s (ensure_topics' timeout): outlive it.
OUTLIVE_S = 20.0

# live_case_service waits for /readyz 200 before yielding: with a consumer or Kafka check
# gating /readyz the fixture itself fails ("not ready in 90 s").
service = live_service_fixture("readiness-no-kafka", {"CASESTREAM_KAFKA_BOOTSTRAP": DEAD_KAFKA})


@pytest.fixture
def http(service: LiveService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=15) as client:
        yield client


def test_commands_are_accepted_into_the_outbox_while_kafka_is_down(http: httpx.Client,
                                                                     service: LiveService) -> None:
    time.sleep(OUTLIVE_S)
    assert service.proc.poll() is None, service.log_tail()
    ready = http.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready"}

    opened = http.post("/cases", json=BODY, headers=officer())
    assert opened.status_code == 201, opened.text
    case_id = str(opened.json()["id"])
    with psycopg.connect(service.dsn) as conn:
        rows = conn.execute("SELECT type, status FROM outbox WHERE aggregateid = %s",
                            (case_id,)).fetchall()
    assert rows == [("CaseOpened", "pending")], rows

    consumers = http.get("/readyz/consumers")
    assert consumers.status_code == 503, consumers.text
    failing = consumers.json()["failing"]
    assert DEAD_KAFKA in failing["kafka"], failing
    assert "registry" not in failing  # the registry is up: only what is down is named
    assert any(name.startswith("case.") for name in failing), failing  # the case consumers
    assert http.get("/readyz").status_code == 200  # still taking commands
