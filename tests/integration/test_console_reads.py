"""The console against the real broker: operator input never creates a topic, and 50
concurrent journey and dead-letter requests leave memory flat (bounded, reused reads).

The console runs in this process under uvicorn on a free port (its thread pool and event
loop as in ``casestream console``); the resident set of the process is sampled every 20 ms.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from casestream.auth import ROLE_OPERATOR, ROLE_SUPERVISOR, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.consumer import DeadLetter
from casestream.consumer.deadletters import dead_letter_headers
from casestream.consumer.records import Record
from casestream.operations import load_dead_letter_state
from casestream.testing import create_topics, delete_topics

MESSAGES = 4000            # per topic
VALUE = b"x" * 2048        # bytes per message: a journey read of the topic holds ~8 MiB
CONCURRENT = 50


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def world(kafka_bootstrap: str) -> Iterator[tuple[str, str]]:
    """A journey topic and a consumer's dead-letter topic, both full of 2 KiB messages."""
    run = uuid.uuid4().hex[:8]
    journey, consumer = f"test.console-{run}.case", f"test.console-{run}.worker"
    create_topics(kafka_bootstrap, [journey, f"{consumer}.dlq"], partitions=2)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    now = datetime.now(timezone.utc)
    for i in range(MESSAGES):
        p.produce(journey, key=f"case-{i}".encode(), value=VALUE)
        record = Record(topic=journey, partition=0, offset=i, key=f"case-{i}".encode(), value=VALUE, headers=())
        dl = DeadLetter(record=record, error_class="builtins.RuntimeError", reason="retries_exhausted",
                        message="down", attempts=5, first_failure=now, last_failure=now)
        p.produce(f"{consumer}.dlq", key=record.key, value=VALUE, headers=dead_letter_headers(consumer, dl))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    try:
        yield journey, consumer
    finally:
        delete_topics(kafka_bootstrap, [journey, f"{consumer}.dlq"])


@pytest.fixture
def console(kafka_bootstrap: str, world: tuple[str, str]) -> Iterator[str]:
    import uvicorn

    journey, consumer = world
    settings = ConsoleSettings(max_in_flight=CONCURRENT + 10, rate_client_burst=10 * CONCURRENT,
                               journey_timeout_s=60)
    sources = ConsoleSources(settings=settings, kafka={"bootstrap.servers": kafka_bootstrap,
                                                      "allow.auto.create.topics": False},
                             codec=None, services={}, consumers=[consumer], journey_topics=[journey])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(console_app(sources, TokenVerifier(AuthSettings())),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "console did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_an_unknown_consumer_never_creates_its_topics(kafka_bootstrap: str, console: str) -> None:
    made_up = f"made-up-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {dev_token('tenant-a', (ROLE_SUPERVISOR, ROLE_OPERATOR))}"}
    for action in ("redrive", "discard"):
        r = httpx.post(f"{console}/deadletters/{made_up}", headers=headers, timeout=30,
                       data={"action": action, "label": "0:1", "reason": "probe"})
        assert r.status_code == 400 and f"consumer: unknown {made_up}" in r.text, r.text
    assert httpx.get(f"{console}/deadletters?consumer={made_up}", headers=headers, timeout=30).status_code == 400
    # the CLI's read of a consumer's dead letters asks for topic metadata by name: no creation
    other = f"made-up-{uuid.uuid4().hex[:8]}"
    assert load_dead_letter_state(kafka_bootstrap, other).entries == ()
    time.sleep(1)  # an auto-created topic shows up in the metadata within a moment
    left = {t for t in topic_names(kafka_bootstrap) if t.startswith(made_up) or t.startswith(other)}
    if left:
        delete_topics(kafka_bootstrap, left)
    assert not left, f"operator input created topics: {sorted(left)}"


def test_memory_stays_flat_under_50_concurrent_journey_and_dead_letter_requests(
        console: str, world: tuple[str, str]) -> None:
    _, consumer = world
    headers = {"Authorization": f"Bearer {dev_token('tenant-a', (ROLE_OPERATOR,), subject='op')}"}
    # one journey read and one dead-letter read first, one after the other: imports, pools and
    # the allocator's arenas are then as a served read leaves them, and RSS is "before"
    with httpx.Client(timeout=120, headers=headers) as warm:
        assert warm.get(f"{console}/journeys?case_id=warm").status_code == 404
        assert warm.get(f"{console}/deadletters?consumer={consumer}").status_code == 200
    time.sleep(3)  # the warm-up's dead-letter read is no longer reused
    # one client for the 50 threads (made now: its TLS context and pool are not the console's)
    shared = httpx.Client(timeout=120, headers=headers, limits=httpx.Limits(max_connections=CONCURRENT))
    with ThreadPoolExecutor(CONCURRENT) as pool:  # the threads exist before "before" too
        list(pool.map(lambda _: None, range(CONCURRENT)))
    before = rss_bytes()
    peak, stop = [before], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    paths = [f"/journeys?case_id=absent-{i}" if i % 2 else f"/deadletters?consumer={consumer}"
             for i in range(CONCURRENT)]
    start = threading.Barrier(CONCURRENT)

    other: list[str] = []

    def get(path: str) -> int:
        start.wait(30)
        r = shared.get(console + path)
        if r.status_code == 503 and "id=busy" not in r.text:
            other.append(f"{path}: {r.text[-400:]}")
        return r.status_code

    try:
        with ThreadPoolExecutor(CONCURRENT) as pool:
            statuses = Counter(pool.map(get, paths))
    finally:
        stop.set()
        sampler.join()
        shared.close()
    after = rss_bytes()
    mib = 1024 * 1024
    print(f"\nRSS before {before / mib:.1f} MiB, peak {peak[0] / mib:.1f} MiB (+{(peak[0] - before) / mib:.1f}), "
          f"after {after / mib:.1f} MiB; answers {dict(statuses)}")
    assert set(statuses) <= {200, 404, 503} and not other, (statuses, other[:2])
    assert statuses[200] + statuses[404] >= 1  # served while a slot was free, the rest told to retry
    # a read of 8 MiB of messages peaks at ~30 MiB (messages, their copies, the page): the
    # two reads allowed at once (expensive_concurrency) stay under 96 MiB whatever the number
    # of requests; 50 unbounded reads rose ~680 MiB on the same topics
    assert peak[0] - before < 96 * mib, f"RSS rose {(peak[0] - before) / mib:.1f} MiB"
