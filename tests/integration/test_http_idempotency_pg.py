"""The Idempotency-Key store on a real PostgreSQL (casestream.http.pgidempotency).

The store contract (tests/support/idempotency_contract.py) on ``PgIdempotencyStore``; the
library migration applied with a service's own migrations; the stored response committed
with the command's state change or not at all (a failing or crashed command); the atomic
creation under two concurrent requests with one key; purge of expired records.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.http import (
    IDEMPOTENCY_MIGRATION,
    Idempotency,
    IdempotencyConflict,
    IdempotencyRecord,
    PgIdempotencyStore,
    RequestInFlight,
    StoredResponse,
    idempotency_purge_worker,
)
from casestream.migrations import apply_migrations
from casestream.service import service_migrations
from tests.support.idempotency_contract import CONTRACT, StepClock, request


@pytest.fixture(scope="module")
def dsn(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh schema migrated as a service with an outbox is: the library's DDL, then its
    own ``001_items.sql``."""
    parts = urlsplit(pg_url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/casestream_test")
    url = urlunsplit(parts)
    schema = f"idem_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    option = quote(f"-csearch_path={schema}")
    scoped = urlunsplit(parts._replace(query=f"options={option}"))
    folder = tmp_path_factory.mktemp("migrations")
    (folder / "001_items.sql").write_text("CREATE TABLE items (id text PRIMARY KEY, n int NOT NULL);\n")
    try:
        applied = apply_migrations(scoped, service_migrations(Path(folder)))
        assert IDEMPOTENCY_MIGRATION.name in applied and applied[-1] == "001_items.sql"
        yield scoped
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class PgBackend:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn) as conn:
            conn.execute("TRUNCATE idempotency_keys, items")

    @contextmanager
    def transaction(self) -> Iterator[PgIdempotencyStore]:
        with psycopg.connect(self.dsn) as conn, conn.transaction():
            yield PgIdempotencyStore(conn)

    def count(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT count(*) FROM idempotency_keys").fetchone()
        return int(row[0]) if row else -1


def items(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT id, n FROM items ORDER BY id").fetchall()


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_store_contract_on_postgresql(dsn: str, body: Callable[[PgBackend], None]) -> None:
    body(PgBackend(dsn))


def command(dsn: str, idem: Idempotency, key: str, n: int, *, fail: bool = False,
            crash: bool = False, ready: threading.Barrier | None = None) -> tuple[StoredResponse, bool]:
    """A service's command: the item row and the stored response in one transaction."""
    conn = psycopg.connect(dsn)
    try:
        with conn.transaction():
            store = PgIdempotencyStore(conn)
            if ready is not None:
                ready.wait(10)
            stored = idem.begin(store, request(key, {"n": n}))
            if stored is not None:
                return stored, True
            conn.execute("INSERT INTO items (id, n) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
                         "SET n = items.n + EXCLUDED.n", (key, n))
            stored = idem.complete(store, request(key, {"n": n}),
                                   StoredResponse(status=201, body={"id": key, "n": n}))
            if crash:  # the session dies before its commit: the server aborts the transaction
                with psycopg.connect(dsn, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            if fail:
                raise RuntimeError("the command failed after its writes")
            return stored, False
    finally:
        conn.close()


def test_a_failed_command_leaves_no_stored_response(dsn: str) -> None:
    PgBackend(dsn)
    idem = Idempotency(clock=StepClock())
    with pytest.raises(RuntimeError):
        command(dsn, idem, "fails", 1, fail=True)
    assert items(dsn) == [] and PgBackend(dsn).count() == 0


def test_a_crashed_command_leaves_no_stored_response(dsn: str) -> None:
    PgBackend(dsn)
    idem = Idempotency(clock=StepClock())
    with pytest.raises(psycopg.OperationalError):
        command(dsn, idem, "crashes", 1, crash=True)
    assert items(dsn) == [] and PgBackend(dsn).count() == 0
    assert command(dsn, idem, "crashes", 1) == (StoredResponse(status=201, body={"id": "crashes", "n": 1}),
                                                False)
    assert items(dsn) == [("crashes", 1)]


def test_two_concurrent_requests_with_one_key_apply_once(dsn: str) -> None:
    PgBackend(dsn)
    idem = Idempotency(clock=StepClock())
    for round_ in range(5):
        key = f"race-{round_}"
        ready = threading.Barrier(2)
        outcomes: list[Any] = []

        def one() -> None:
            try:
                outcomes.append(command(dsn, idem, key, 1, ready=ready))
            except RequestInFlight as e:
                outcomes.append(e)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        processed = [o for o in outcomes if isinstance(o, tuple) and o[1] is False]
        others = [o for o in outcomes if o not in processed]
        assert len(processed) == 1 and len(others) == 1, outcomes
        assert isinstance(others[0], RequestInFlight) or others[0] == (processed[0][0], True)
    assert items(dsn) == [(f"race-{i}", 1) for i in range(5)]


def test_the_insert_never_overwrites_a_record_created_concurrently(dsn: str) -> None:
    """Two transactions that both found no record (no key lock taken): the second INSERT
    waits for the first's commit, then refuses instead of overwriting."""
    PgBackend(dsn)
    clock = StepClock()
    req = request("lockless")

    def record(n: int) -> IdempotencyRecord:
        return IdempotencyRecord(scope=req.scope, fingerprint=req.fingerprint,
                                 response=StoredResponse(status=201, body={"n": n}),
                                 created_at=clock.at, expires_at=clock.at + Idempotency().ttl)

    second: list[BaseException | None] = []
    with psycopg.connect(dsn) as first, first.transaction():
        PgIdempotencyStore(first).save(record(1))

        def save_second() -> None:
            try:
                with psycopg.connect(dsn) as conn, conn.transaction():
                    PgIdempotencyStore(conn).save(record(2))
                second.append(None)
            except IdempotencyConflict as e:
                second.append(e)

        waiter = threading.Thread(target=save_second)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive(), "the second INSERT must wait for the first transaction"
    waiter.join(10)
    assert len(second) == 1 and isinstance(second[0], IdempotencyConflict)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT response_body FROM idempotency_keys").fetchall() == [({"n": 1},)]


def test_the_purge_worker_deletes_expired_records_in_batches(dsn: str) -> None:
    backend = PgBackend(dsn)
    clock = StepClock()
    idem = Idempotency(clock=clock)
    for n in range(5):
        command(dsn, idem, f"old-{n}", n)
    clock.at += idem.ttl
    command(dsn, idem, "fresh", 9)
    stop = threading.Event()
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        worker = threading.Thread(target=idempotency_purge_worker(idem, pool, interval_s=0.05,
                                                                  batch=2), args=(stop,))
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while backend.count() != 1:
                assert time.monotonic() < deadline, f"{backend.count()} records left"
                time.sleep(0.05)
        finally:
            stop.set()
            worker.join(10)
    assert not worker.is_alive()
    with PgBackend.transaction(backend) as store:
        assert store.find(request("fresh", {"n": 9}).scope) is not None
    with pytest.raises(ValueError, match="interval_s"):
        idempotency_purge_worker(idem, None, interval_s=0)
