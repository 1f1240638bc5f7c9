"""The case service as a live process for API tests (no tests here).

:func:`live_case_service` starts ``python -m services.case`` on a free port against the
real infrastructure — PostgreSQL (a fresh database, dropped afterwards), the shared
schema registry, and a private Kafka broker (same jars as ``deploy/infra.sh``, own ports,
so the relay's events never reach other tests' consumers) — waits for ``/readyz``, and
stops it with SIGTERM. Extra environment variables tune the edge (limits, deadline).
Fails, like every integration test, with set-up instructions when the infrastructure is
not there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_case_support import server_url

from tests.support.databases import created_databases, require_server

from casestream.testing.relay import PrivateKafka, create_topics, free_port

REPO = Path(__file__).resolve().parents[2]
CLASSPATH = REPO / ".local" / "kafka" / "classpath.txt"
TOPICS = ["outbox.event.case", "outbox.event.saga", "outbox.event.decision",
          "outbox.event.notice"]


@dataclass(frozen=True, slots=True)
class LiveService:
    """A running case service: its base URL, database URL, log file and process."""

    url: str
    dsn: str
    log: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@contextmanager
def _database(request: pytest.FixtureRequest, prefix: str) -> Iterator[str]:
    admin = require_server(server_url(request).rstrip("/"))
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with created_databases(admin, [name]):
        yield name


@contextmanager
def live_case_service(request: pytest.FixtureRequest, workdir: Path, registry_url: str,
                      env: Mapping[str, str] = {}) -> Iterator[LiveService]:
    """Run the case service (see module docstring); ``env`` overrides its environment."""
    if not CLASSPATH.is_file():
        pytest.fail(f"Kafka jars not resolved ({CLASSPATH} missing): run `make infra-up` "
                    "or the suite through `make test`", pytrace=False)
    with _database(request, "case_api") as database:
        broker = PrivateKafka(CLASSPATH, workdir / "kafka")
        broker.start()
        try:
            create_topics(broker.bootstrap, TOPICS, partitions=1)
            port = free_port()
            full_env = {**os.environ, "CASESTREAM_KAFKA_BOOTSTRAP": broker.bootstrap,
                        "CASESTREAM_REGISTRY_URL": registry_url,
                        "CASESTREAM_PG_URL": server_url(request).rstrip("/"),
                        "CASESTREAM_CASE_DATABASE": database,
                        "CASESTREAM_CASE_PORT": str(port), **env}
            log = workdir / "case.log"
            with open(log, "ab") as out:
                proc = subprocess.Popen([sys.executable, "-m", "services.case"], cwd=REPO,
                                        env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            service = LiveService(url=f"http://127.0.0.1:{port}",
                                  dsn=f"{full_env['CASESTREAM_PG_URL']}/{database}", log=log,
                                  proc=proc)
            try:
                _wait_ready(service)
                yield service
            finally:
                _stop(proc)
        finally:
            broker.close()


def live_service_fixture(workdir_name: str, env: Mapping[str, str] = {}) -> Any:
    """A module-scoped fixture ``service``: :func:`live_case_service` with ``env``, its work
    directory a fresh ``workdir_name`` temporary directory. Assign it as ``service = ...``."""

    @pytest.fixture(scope="module", name="service")
    def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                registry_url: str) -> Iterator[LiveService]:
        with live_case_service(request, tmp_path_factory.mktemp(workdir_name), registry_url,
                               env) as live:
            yield live

    return service


def _wait_ready(service: LiveService, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            pytest.fail(f"case service exited with {service.proc.returncode}:\n"
                        f"{service.log_tail()}", pytrace=False)
        try:
            if httpx.get(f"{service.url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"case service not ready in {timeout_s} s:\n{service.log_tail()}", pytrace=False)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
