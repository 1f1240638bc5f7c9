"""The fault soak, short: two minutes of cases through the suite with two instances of every
service (separate processes, same databases and consumer groups, relays sharing the outbox
shards by lease) while service instances and a relay are SIGKILLed and started again, Kafka
and PostgreSQL restarted, consumer groups rebalanced and poison messages injected; every
invariant of ``services.soak`` must hold, the work-sharing one included (each consumer and
relay of every service worked in both instances). ``make soak`` runs the long version
(``SOAK_MINUTES``, ``REPLICAS``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.demo import SUITE
from services.soak import FAULT_KINDS, Options, every_service, run

# it restarts the shared Kafka and PostgreSQL: make test runs it after the parallel run, alone
pytestmark = pytest.mark.exclusive


def test_two_minutes_of_faults_on_two_instances_of_every_service_break_no_invariant(
        infra_env: dict[str, str], smtp_maildir: Path) -> None:
    env = {**infra_env, "CASESTREAM_SMTP_MAILDIR": str(smtp_maildir)}
    logs = Path(".local/soak-logs/e2e")  # kept after the run: what to read when it fails
    shutil.rmtree(logs, ignore_errors=True)
    report = run(Options(minutes=2.0, rate=1.0, fault_gap_s=(1.0, 5.0), log_dir=logs,
                         replicas=every_service(2)), env)
    kinds = {f.kind for f in report.faults}
    assert kinds == set(FAULT_KINDS), f"not every kind of fault was injected: {kinds}"
    assert report.ok, "\n".join(report.lines())
    checked = {c.name for c in report.checks}
    assert {"inbox sizes bounded", "work shared between instances"} <= checked
    # every service ran as two instances, and each was sampled doing work
    assert {i for i in report.work if "#" in i} == {f"{n}#{k}" for n in SUITE for k in (1, 2)}
