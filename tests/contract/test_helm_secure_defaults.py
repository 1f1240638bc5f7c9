"""Contract: the Helm chart's defaults are the secure ones a production service accepts —
Kafka over SASL_SSL, an https registry with credentials, PostgreSQL with sslmode=require,
the bearer key from the Secret, CASESTREAM_TRANSPORT_SECURITY=tls — and ``mesh`` is one
explicit value (``transportSecurity``). helm comes from ``make k8s-tools``; the test fails,
never skips, when it is missing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "casestream"
# one service named on the command line: the chart's own defaults for everything else
ONE_SERVICE = ["--set", "services.probe.module=probe", "--set", "services.probe.port=18199"]


def _helm() -> str:
    proc = subprocess.run([str(REPO / "deploy" / "k8s" / "tools.sh"), "path", "helm"],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"{proc.stderr.strip()} -- run `make k8s-tools`.", pytrace=False)
    return proc.stdout.strip()


def _env(*args: str) -> dict[str, Any]:
    proc = subprocess.run([_helm(), "template", "cs", str(CHART), *ONE_SERVICE, *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [deployment] = [d for d in yaml.safe_load_all(proc.stdout)
                    if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "cs-probe"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_default_values_encrypt_and_authenticate_every_transport() -> None:
    env = _env()
    assert env["CASESTREAM_ENV"] == "production"
    assert env["CASESTREAM_TRANSPORT_SECURITY"] == "tls"
    assert env["CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE"] == "/run/secrets/casestream/kafka-password"
    assert env["CASESTREAM_REGISTRY_URL"].startswith("https://")
    assert env["CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE"] == (
        "/run/secrets/casestream/registry-user-info")
    assert conninfo_to_dict(env["CASESTREAM_PG_URL"])["sslmode"] in ("require", "verify-ca", "verify-full")
    assert env["CASESTREAM_AUTH_JWT_KEY_FILE"] == "/run/secrets/casestream/jwt-key"
    assert "CASESTREAM_AUTH_JWT_KEY" not in env


def test_mesh_is_one_explicit_value() -> None:
    env = _env("--set", "transportSecurity=mesh")
    assert env["CASESTREAM_TRANSPORT_SECURITY"] == "mesh"
