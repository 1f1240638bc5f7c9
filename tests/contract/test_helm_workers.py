"""Contract: the Helm chart's ``workers`` value (``CASESTREAM_WORKERS``, worker processes per
pod) reaches every service's container, and counts in the replica cap: partitions /
(workers x consumerConcurrency) members at most, a larger ``maxReplicas`` refused."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "casestream"
SUITE = ["-f", str(REPO / "deploy" / "helm" / "suite-values.yaml")]
AUTOSCALED = ["--set", "autoscaling.enabled=true"]  # the cap is KEDA's maxReplicaCount


@pytest.fixture(scope="module")
def helm() -> str:
    proc = subprocess.run([str(REPO / "deploy" / "k8s" / "tools.sh"), "path", "helm"],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"{proc.stderr.strip()} -- run `make k8s-tools`.", pytrace=False)
    return proc.stdout.strip()


def _template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, "template", "cs", str(CHART), *SUITE, *args],
                          capture_output=True, text=True, timeout=60)


def _workers_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for d in docs:
        if d and d["kind"] in ("Deployment", "StatefulSet"):
            env = d["spec"]["template"]["spec"]["containers"][0]["env"]
            out[d["metadata"]["name"]] = next(e["value"] for e in env if e["name"] == "CASESTREAM_WORKERS")
    return out


def test_every_service_runs_the_workers_value(helm: str) -> None:
    default = _template(helm)
    assert default.returncode == 0, default.stderr
    assert set(_workers_env(list(yaml.safe_load_all(default.stdout))).values()) == {"1"}
    two = _template(helm, "--set", "workers=2")
    assert two.returncode == 0, two.stderr
    envs = _workers_env(list(yaml.safe_load_all(two.stdout)))
    assert envs and set(envs.values()) == {"2"}, envs


def test_workers_count_in_the_replica_cap(helm: str) -> None:
    # the suite's values, KEDA on: 6 partitions, consumerConcurrency 1; 3 workers -> 2 pods at most
    assert _template(helm, *AUTOSCALED, "--set", "services.audit.maxReplicas=3").returncode == 0
    proc = _template(helm, *AUTOSCALED, "--set", "workers=3", "--set", "services.audit.maxReplicas=3")
    assert proc.returncode != 0
    assert "exceeds partitions/(workers x consumerConcurrency) = 2" in proc.stderr
    assert _template(helm, *AUTOSCALED, "--set", "workers=3", "--set", "services.audit.maxReplicas=2").returncode == 0
