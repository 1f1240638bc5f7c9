"""The fault soak, short: three minutes of cases through the suite (two case and two audit
instances) while service instances and a relay are SIGKILLed, Kafka and PostgreSQL restarted,
consumer groups rebalanced and poison messages injected; every invariant of
``services.soak`` must hold. ``make soak`` runs the long version (``SOAK_MINUTES``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.soak import FAULT_KINDS, Options, run

pytestmark = pytest.mark.e2e


def test_three_minutes_of_faults_break_no_invariant(
        infra_env: dict[str, str], smtp_maildir: Path) -> None:
    env = {**infra_env, "CASESTREAM_SMTP_MAILDIR": str(smtp_maildir)}
    logs = Path(".local/soak-logs/e2e")  # kept after the run: what to read when it fails
    shutil.rmtree(logs, ignore_errors=True)
    report = run(Options(minutes=3.0, rate=1.0, fault_gap_s=(1.0, 5.0), log_dir=logs), env)
    kinds = {f.kind for f in report.faults}
    assert kinds == set(FAULT_KINDS), f"not every kind of fault was injected: {kinds}"
    assert report.ok, "\n".join(report.lines())
