"""The chaos rig's network faults, each on its own against the real PostgreSQL through a real
Toxiproxy (``deploy/toxiproxy/tools.sh``; the server on a port of this test): what the rig
injects does to a client what ``services.chaos`` says it does.

- ``limit_data`` (bytes 0) on the server -> client stream, added after a transaction's
  statements and before its ``COMMIT``: the commit is applied, the client sees a connection
  error (the ambiguous commit);
- ``latency`` delays every round trip by at least the latency;
- ``timeout`` (0) on the server -> client stream: the connection stays open and no answer
  comes while the toxic is there (a silent peer: the answers are dropped); removing it closes
  the connection;
- ``reset_peer`` and a disabled proxy: the next statement fails, a new connection works once
  the fault is gone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from casestream.testing.consumer import database_dsn
from casestream.testing.toxiproxy import (
    TOOLS, Toxiproxy, ToxiproxyError, ToxiproxyServer, upstream, via,
)

API_PORT, PG_PROXY_PORT = 17574, 17532  # below 32768, clear of the chaos rig's 17xxx ports


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    import subprocess

    subprocess.run([str(TOOLS), "install"], check=True, timeout=900)
    server = ToxiproxyServer(API_PORT, tmp_path_factory.mktemp("toxiproxy") / "server.log")
    client = server.start()
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.fixture()
def pg_proxy(toxiproxy: Toxiproxy, pg_url: str) -> Iterator[tuple[str, str]]:
    """(DSN through the proxy, direct DSN) of the test database; the proxy without toxics."""
    toxiproxy.create("pg", f"127.0.0.1:{PG_PROXY_PORT}", upstream(pg_url))
    direct = database_dsn(pg_url)
    proxied = database_dsn(via(pg_url, PG_PROXY_PORT))
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS toxiproxy_fault (id text PRIMARY KEY)")
    yield proxied, direct
    toxiproxy.reset()


def test_limit_data_after_the_statements_makes_an_ambiguous_commit(
        toxiproxy: Toxiproxy, pg_proxy: tuple[str, str]) -> None:
    proxied, direct = pg_proxy
    row = str(uuid.uuid4())
    conn = psycopg.connect(proxied)
    conn.execute("INSERT INTO toxiproxy_fault (id) VALUES (%s)", (row,))
    toxiproxy.add_toxic("pg", "limit_data", stream="downstream", bytes=0)
    with pytest.raises(psycopg.OperationalError):
        conn.commit()  # COMMIT reaches the server; its answer never reaches the client
    conn.close()
    toxiproxy.reset()
    with psycopg.connect(direct) as check:
        found = check.execute("SELECT count(*) FROM toxiproxy_fault WHERE id = %s", (row,)).fetchone()
    assert found == (1,), "the commit the client saw fail was not applied"


def test_latency_delays_every_round_trip(toxiproxy: Toxiproxy, pg_proxy: tuple[str, str]) -> None:
    proxied, _ = pg_proxy
    with psycopg.connect(proxied, autocommit=True) as conn:
        began = time.monotonic()
        conn.execute("SELECT 1")
        fast = time.monotonic() - began
        toxiproxy.add_toxic("pg", "latency", stream="downstream", latency=400)
        began = time.monotonic()
        conn.execute("SELECT 1")
        slow = time.monotonic() - began
    assert slow >= 0.4 > fast


def test_timeout_zero_holds_a_half_open_connection(
        toxiproxy: Toxiproxy, pg_proxy: tuple[str, str]) -> None:
    proxied, _ = pg_proxy
    conn = psycopg.connect(proxied, autocommit=True)
    toxiproxy.add_toxic("pg", "timeout", stream="downstream", timeout=0)
    outcome: list[BaseException | tuple[Any, ...] | None] = []
    waiting = threading.Thread(target=_capture, args=(conn, outcome), daemon=True)
    waiting.start()
    waiting.join(2.0)
    assert waiting.is_alive(), f"the query answered through a half-open connection: {outcome}"
    toxiproxy.remove_toxic("pg", "timeout_downstream")
    waiting.join(10.0)  # the answer was dropped; removing the toxic closes the connection
    assert not waiting.is_alive() and isinstance(outcome[0], psycopg.OperationalError), outcome
    conn.close()


def _capture(conn: psycopg.Connection[Any], outcome: list[Any]) -> None:
    try:
        outcome.append(conn.execute("SELECT 1").fetchone())
    except BaseException as e:  # noqa: BLE001 - the test reads it
        outcome.append(e)


@pytest.mark.parametrize("fault", ["reset_peer", "disabled"])
def test_a_cut_connection_fails_and_a_new_one_works_afterwards(
        toxiproxy: Toxiproxy, pg_proxy: tuple[str, str], fault: str) -> None:
    proxied, _ = pg_proxy
    conn = psycopg.connect(proxied, autocommit=True)
    if fault == "reset_peer":
        toxiproxy.add_toxic("pg", "reset_peer", stream="upstream", timeout=0)
    else:
        toxiproxy.enable("pg", False)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    conn.close()
    toxiproxy.reset()
    with psycopg.connect(proxied, autocommit=True) as again:
        assert again.execute("SELECT 1").fetchone() == (1,)


def test_a_second_server_on_a_taken_port_is_refused(toxiproxy: Toxiproxy, tmp_path: Path) -> None:
    with pytest.raises(ToxiproxyError, match="taken"):
        ToxiproxyServer(API_PORT, tmp_path / "second.log").start()


def test_the_tools_script_names_the_built_server() -> None:
    import subprocess

    path = Path(subprocess.run([str(TOOLS), "path"], capture_output=True, text=True,
                               check=True).stdout.strip())
    assert path.name == "toxiproxy-server" and path.is_file()
