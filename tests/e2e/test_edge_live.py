"""The shared HTTP edge of every live service: schemathesis finds no 5xx and no contract
violation.

The services run as processes (``casestream.service.ServiceStack``) on a private Kafka
broker (own ports), fresh databases on the shared PostgreSQL and the shared schema
registry. Then:

``schemathesis run`` (the PyPI tool's CLI; all checks; phases examples, coverage, fuzzing
and stateful through the documents' links) runs against each service's ``/openapi.json``
with a bearer token minted with the development key.

In ``make test`` this is the short version: the saga service alone, few examples (the case
service has its own run, ``tests/integration/test_schemathesis_case.py``, and its slow
clients test, ``tests/integration/test_case_api_live.py``). ``make test-edge``
(``CASESTREAM_TEST_EDGE_FULL=1``) runs the five services and the example ``watch``
service, schemathesis on each with more examples.
- 40 clients trickling request bodies and 20 sending their headers byte by byte hold the
  case service's connections; a normal client is served meanwhile (``POST /cases`` 201,
  ``/readyz`` 200), each slow body is answered 408 after the body read timeout, and the
  service logs no error when slow clients hang up (before or after their answer).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from casestream.auth.tokens import dev_token
from casestream.service import ServiceStack
from tests.support.suite import private_broker, running_stack, service_databases, suite_env

TOPICS = ["outbox.event.case", "outbox.event.saga", "outbox.event.decision",
          "outbox.event.notice", "outbox.event.watch"]
FULL = os.environ.get("CASESTREAM_TEST_EDGE_FULL") == "1"
SERVICES = ("case", "saga", "decision", "notification", "audit", "watch") if FULL else (
    "saga",)
ROLES = {"saga": ("supervisor",)}  # resolve needs a supervisor; every read allows one
MAX_EXAMPLES = 50 if FULL else 5
SEED = 20_251_201
CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "412", "429", "503"]
"""


@pytest.fixture(scope="module")
def stack(pg_url: str, registry_url: str, smtp_address: tuple[str, int],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceStack]:
    with private_broker(tmp_path_factory, "edge-kafka", TOPICS, partitions=1) as broker, \
            service_databases(pg_url, SERVICES, "edge") as databases:
        env = suite_env(broker.bootstrap, pg_url, registry_url, databases, rate_limit=100_000)
        with running_stack(env, SERVICES, tmp_path_factory.mktemp("edge-logs")) as services:
            yield services


def base_url(stack: ServiceStack, service: str) -> str:
    return f"http://127.0.0.1:{stack.env[f'CASESTREAM_{service.upper()}_PORT']}"


def service_log(stack: ServiceStack, service: str) -> str:
    assert stack.log_dir is not None
    return (stack.log_dir / f"{service}.log").read_text(errors="replace")


@pytest.mark.parametrize("service", SERVICES)
def test_schemathesis_finds_no_5xx_and_no_contract_violation(stack: ServiceStack, service: str,
                                                            tmp_path: Path) -> None:
    url = base_url(stack, service)
    document = httpx.get(f"{url}/openapi.json", timeout=10)
    assert document.status_code == 200 and document.json()["openapi"] == "3.1.0"
    operations = sum(len(item) for item in document.json()["paths"].values())
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    token = dev_token(f"st-{service}", ROLES.get(service, ("officer",)), subject="schemathesis")
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
        "run", f"{url}/openapi.json", "--checks", "all",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--header", f"Authorization: Bearer {token}",
        "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "2",
        "--request-timeout", "10", "--output-sanitize", "false",
    ]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis found problems on {service}:\n{output[-12000:]}"
    assert "FAILURES" not in output and "passed" in output, output[-4000:]
    assert f"{operations} selected / {operations} total" in output, output[-4000:]
    log = service_log(stack, service)
    assert "unhandled error" not in log and "Traceback" not in log, log[-4000:]
