"""Smoke of bench/journeys.py: the suite started by the bench's launcher, a few journeys at
a low arrival rate, and what it reports read from the audit trail and the inboxes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_bench_reports_journeys_from_the_audit_trail(pg_url: str, registry_url: str,
                                                     kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {**os.environ, "CASESTREAM_PG_URL": pg_url, "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "journeys.py"), "--rates", "4", "--seconds", "3",
         "--concurrency", "0", "--drain-s", "40", "--log-dir", str(tmp_path / "logs")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    record = json.loads(next(line for line in out.splitlines()
                             if line.startswith("BENCH "))[len("BENCH "):])
    assert record["durability"] == "synchronous_commit=on"
    (phase,) = record["phases"]
    assert phase["started"] == 12 and phase["ended"] == 12, out
    journey = phase["journey_ms"]
    assert journey["p99"] is not None and 0 < journey["p50"] <= journey["p99"], out
    assert set(phase["cpu_s"]) >= {"case", "decision", "audit", "notification", "saga",
                                   "postgres", "bench"}
    assert "case occurred → topic" in out and "topic → audit-journal commit" in out
    assert any(line.strip().startswith("topic → saga") for line in out.splitlines()), out
