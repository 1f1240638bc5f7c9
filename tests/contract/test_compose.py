"""Contract: docker-compose.yml is accepted by Docker Compose and describes the whole topology.

`docker compose config` parses, interpolates and validates the file against the Compose
Specification without a Docker engine. The compose CLI is provided by `deploy/compose.sh
install` (`make compose`, a prerequisite of `make test`): the test fails, never skips, when it
is missing, so a machine without it cannot pass silently.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
SERVICES = {"case", "decision", "audit", "notification", "saga"}
INFRA = {"kafka", "postgres", "registry", "smtp"}


@pytest.fixture(scope="module")
def compose() -> list[str]:
    """The compose command line (`docker compose` or a docker-compose v2+ binary)."""
    proc = subprocess.run([str(REPO / "deploy" / "compose.sh"), "path"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        pytest.fail(f"no Docker Compose CLI: {proc.stderr.strip()} -- run `make compose`.", pytrace=False)
    return shlex.split(proc.stdout.strip())


def _run(compose: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*compose, "-f", str(COMPOSE_FILE), "--project-directory", str(REPO), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_compose_accepts_the_file(compose: list[str]) -> None:
    proc = _run(compose, "config", "-q")
    assert proc.returncode == 0, f"docker compose config rejected docker-compose.yml:\n{proc.stderr}"


def test_compose_rejects_a_broken_file(compose: list[str], tmp_path: Path) -> None:
    """The check can fail: an unknown service key is an error for compose."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text() + "\n  bogus:\n    image: x\n    not_a_compose_key: 1\n")
    proc = subprocess.run([*compose, "-f", str(broken), "--project-directory", str(REPO), "config", "-q"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode != 0
    assert "not_a_compose_key" in proc.stderr


def test_topology(compose: list[str]) -> None:
    proc = _run(compose, "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)
    services = model["services"]
    assert SERVICES | INFRA <= set(services)
    for name in SERVICES:
        svc = services[name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert svc["command"] == ["python", "-m", f"services.{name}"]
        env = svc["environment"]
        assert env["CASESTREAM_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert env["CASESTREAM_REGISTRY_URL"].endswith("/apis/ccompat/v7")
        assert env["CASESTREAM_PG_URL"].startswith("postgresql://postgres@postgres:")
        assert {"kafka-topics", "postgres", "registry"} <= set(svc["depends_on"])
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert env["CASESTREAM_MIGRATE_AT_START"] == "false"
        port = env[f"CASESTREAM_{name.upper()}_PORT"]
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(svc["healthcheck"]["test"])
    assert services["smtp"]["command"][:2] == ["python", "deploy/smtp_sink.py"]
    assert services["migrate"]["command"] == ["python", "-m", "casestream", "migrate"]
    assert "wal_level=logical" in services["postgres"]["command"]
    assert services["registry"]["image"].startswith("apicurio/apicurio-registry:3.")
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert (REPO / "deploy" / "Dockerfile").is_file()
