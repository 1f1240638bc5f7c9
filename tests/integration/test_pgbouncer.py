"""casestream behind PgBouncer in transaction pooling mode (Debian's PgBouncer, started by
``deploy/infra.sh up pgbouncer``): a server connection serves one transaction of a client and
then another client's, so nothing may rest on session state. Two relays, a consumer and a
replay run through it; the replay's lock is released (a later replay on a direct connection
is not refused). Each test its own database (reached both ways)."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.migrations import apply_migrations, create_database
from casestream.outbox import OUTBOX_MIGRATIONS
from casestream.outbox.relay import OutboxRelay
from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from casestream.testing.relay import create_topics, delete_topics, read_topics
from test_relay_support import RelayThread, env, settings, wait_for, write
from tests.support.events import case_returned

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bouncer_url() -> str:
    """PgBouncer's server URL (started here when it is not running)."""
    done = subprocess.run([str(ROOT / "deploy" / "infra.sh"), "up", "pgbouncer"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return os.environ.get("CASESTREAM_PGBOUNCER_URL",
                          f"postgresql://postgres@127.0.0.1:{os.environ.get('CASESTREAM_PGBOUNCER_PORT', '16432')}")


def _with_db(url: str, name: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "/" + name, p.query, p.fragment))


@pytest.fixture
def db(pg_url: str, bouncer_url: str) -> Iterator[tuple[str, str]]:
    """(direct DSN, DSN through PgBouncer) of a fresh database with the outbox tables."""
    name = f"pgb_{uuid.uuid4().hex[:10]}"
    direct = _with_db(pg_url, name)
    create_database(direct)
    apply_migrations(direct, list(OUTBOX_MIGRATIONS))
    yield direct, _with_db(bouncer_url, name)
    with psycopg.connect(_with_db(pg_url, "postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@contextmanager
def other_clients(dsn: str, n: int = 6) -> Iterator[None]:
    """``n`` clients running short transactions through the pooler meanwhile, so consecutive
    transactions of one client land on different server connections (as in production)."""
    stop = threading.Event()

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
            while not stop.is_set():
                conn.execute("SELECT 1")  # always one waiting: a released server connection moves on

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def test_two_relays_publish_everything_through_the_pooler(db: tuple[str, str], kafka_bootstrap: str) -> None:
    direct, pooled = db
    prefix = f"pgb{uuid.uuid4().hex[:8]}.outbox.event."
    create_topics(kafka_bootstrap, [prefix + "case"], partitions=3)
    try:
        for txn in range(40):  # many small batches: each statement runs many times per connection
            write(direct, [env(f"a{txn % 7}-{txn}", 1)] + [env(f"b{txn}", v) for v in (1, 2, 3)])
        relays = [RelayThread(OutboxRelay(pooled, {"bootstrap.servers": kafka_bootstrap},
                                          settings(prefix, batch_size=3), f"pgb-relay-{i}")) for i in (1, 2)]
        try:
            wait_for(lambda: _pending(direct) == 0 or any(r.error for r in relays), 60,
                     "the relays to publish every row")
        finally:
            for r in relays:
                r.close()
        assert _pending(direct) == 0
        recs = read_topics(kafka_bootstrap, [prefix + "case"], expected=160, timeout_s=30)
        assert len({r.headers["id"] for r in recs}) == 160
    finally:
        delete_topics(kafka_bootstrap, [prefix + "case"])


def _pending(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0])


def test_a_consumer_applies_once_through_the_pooler(db: tuple[str, str], kafka_bootstrap: str) -> None:
    _direct, pooled = db
    h = Harness.create(kafka_bootstrap, pooled, prefix="test.pgbouncer")
    h.pool.close()  # a pool as a team builds it: psycopg's defaults (prepared after 5 runs)
    h.pool = ConnectionPool(h.dsn, min_size=1, max_size=4, open=True)
    try:
        create_topic(h.bootstrap, h.topic, 1)
        events = [case_returned(f"P{i % 5}", i // 5 + 1) for i in range(200)]
        produce_events(h.bootstrap, h.topic, h.codec, events + events[:10])
        with other_clients(pooled):
            rt = h.start(h.runtime(h.settings(batch_size=4)))
            wait_until(lambda: rt.stats.applied + rt.stats.duplicates >= 210 or rt.stats.infra_failures > 0, 60)
            h.stop(rt)
        assert (rt.stats.applied, rt.stats.duplicates, rt.stats.infra_failures) == (200, 10, 0)
        h.one_effect_each([e.event_id for e in events])
    finally:
        h.close()


def test_a_replay_through_the_pooler_releases_its_lock(db: tuple[str, str], kafka_bootstrap: str,
                                                       registry_codec: Any) -> None:
    import dataclasses

    from casestream.events.catalog import load_catalog
    from casestream.replay import ReplayOptions, Replayer, load_projection
    from services import schemas_dir
    from tests.integration.test_replay_support import history

    direct, pooled = db
    topic = f"test.pgbouncer.{uuid.uuid4().hex[:10]}.case"
    create_topic(kafka_bootstrap, topic, 2)
    cases, _decisions = history(6)
    produce_events(kafka_bootstrap, topic, registry_codec, cases)

    def replay(dsn: str) -> Any:
        spec = dataclasses.replace(load_projection("case.dashboard"), topics=(topic,), dsn=lambda: dsn,
                                   live_consumer=f"case.dashboard-{topic}")
        return Replayer(spec, codec=registry_codec, dsn=dsn, bootstrap=kafka_bootstrap,
                        event_types=load_catalog(schemas_dir()).event_types).run(ReplayOptions())

    first = replay(pooled)
    assert first.read == len(cases)
    # nothing of the replay's session stays on the pooler's server connections: a session-level
    # SET synchronous_commit = off there would make other clients' commits asynchronous
    conns = [psycopg.connect(pooled) for _ in range(4)]  # pool size 4: one per server connection
    try:
        sources = [c.execute("SELECT source FROM pg_settings WHERE name = 'synchronous_commit'").fetchone()[0]
                   for c in conns]
    finally:
        for c in conns:
            c.close()
    assert "session" not in sources, sources
    second = replay(direct)  # refused as "another replay is running" while a lock was left behind
    assert second.read == len(cases)


def test_a_relay_behind_the_pooler_finds_listen_deaf_and_polls(
        db: tuple[str, str], kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    direct, pooled = db
    prefix = f"pgb{uuid.uuid4().hex[:8]}.outbox.event."
    create_topics(kafka_bootstrap, [prefix + "case"], partitions=1)
    relays = []
    try:
        with caplog.at_level("WARNING", logger="casestream.relay"):
            relays = [RelayThread(OutboxRelay(dsn, {"bootstrap.servers": kafka_bootstrap},
                                              settings(prefix, poll_interval_s=0.3), name))
                      for dsn, name in ((pooled, "pgb-deaf"), (direct, "pgb-direct"))]
            wait_for(lambda: all(r.relay.shards for r in relays) and relays[0].relay.metrics.shards_held > 0,
                     20, "both relays to hold shards")
            write(direct, [env(f"l{i}", 1) for i in range(20)])
            wait_for(lambda: _pending(direct) == 0, 20, "the relays to publish")
        assert [r.relay.listening for r in relays] == [False, True]
        deaf = [r.getMessage() for r in caplog.records if "receives no notifications" in r.getMessage()]
        assert len(deaf) == 1 and "pgb-deaf" in deaf[0], deaf
    finally:
        for r in relays:
            r.close()
        delete_topics(kafka_bootstrap, [prefix + "case"])
