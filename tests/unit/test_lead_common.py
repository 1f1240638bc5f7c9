"""Unit tests of the common settings, health routes and the demo workload's checks."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from services.demo import EXPECTED_TRAIL, CaseRun, case_mix, check_trail, summarize
from casestream.errors import ConfigError
from casestream.service.process import ServiceProcess, health_routes
from casestream.service.settings import CommonSettings


def test_settings_read_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_PG_URL", "postgresql://u@db:5432/")
    monkeypatch.setenv("CASESTREAM_AUTO_REGISTER_SCHEMAS", "false")
    settings = CommonSettings()
    assert settings.database_url("audit") == "user=u host=db port=5432 dbname=audit"
    assert settings.auto_register_schemas is False


def test_settings_are_frozen_and_reject_empty_database() -> None:
    settings = CommonSettings()
    with pytest.raises(Exception):
        settings.kafka_bootstrap = "elsewhere:9092"  # type: ignore[misc]
    with pytest.raises(ConfigError):
        settings.database_url("")


def test_readyz_names_the_failing_dependency() -> None:
    def kafka_down() -> None:
        raise ConnectionError("broker 127.0.0.1:19092 unreachable")

    app = Starlette(routes=health_routes({"database": lambda: None, "kafka": kafka_down}))
    client = TestClient(app)
    assert client.get("/healthz").json() == {"status": "alive"}
    response = client.get("/readyz")
    assert response.status_code == 503
    assert set(response.json()["failing"]) == {"kafka"}
    assert "unreachable" in response.json()["failing"]["kafka"]


def test_a_crashing_worker_stops_the_process_with_status_1() -> None:
    def crash(stop: threading.Event) -> None:
        raise RuntimeError("boom")

    def patient(stop: threading.Event) -> None:
        stop.wait(30)

    process = ServiceProcess(name="t", app=Starlette(), host="127.0.0.1", port=0,
                             workers={"crash": crash, "patient": patient}, shutdown_timeout_s=5)
    assert process.run() == 1
    assert process.stop.is_set()


def test_case_mix_is_deterministic_with_a_fifth_failing() -> None:
    specs = case_mix(25)
    assert specs == case_mix(25)
    outcomes = [s.expected for s in specs]
    assert outcomes.count("decision_failed") == 5
    assert {"violation", "no_violation"} <= set(outcomes)


def test_check_trail_reports_missing_and_doubled_events() -> None:
    spec = case_mix(10)[6]
    full = EXPECTED_TRAIL[spec.expected]
    assert check_trail(CaseRun(spec, "c1", "closed", full)) == []
    problems = check_trail(CaseRun(spec, "c1", "closed", full[:-1] + (full[1],)))
    assert any(full[-1] in p for p in problems)
    assert any("recorded twice" in p for p in problems)


def test_summary_fails_when_one_case_is_not_final() -> None:
    specs = case_mix(2, failures=0)
    runs = [CaseRun(specs[0], "a", "closed", EXPECTED_TRAIL[specs[0].expected]),
            CaseRun(specs[1], "b", "submitted", ())]
    ok, line = summarize(runs, 1.0)
    assert not ok
    assert "1/2 cases reached a final state" in line


def _sigterm_service(tmp_path: Path, workers_src: str, workers: str,
                     shutdown_timeout_s: float = 30.0) -> tuple[int, str, str, float]:
    """Run a ServiceProcess with ``workers`` (a dict literal over functions defined in
    ``workers_src``) in a child process, SIGTERM it once it listens; return (exit status,
    stdout, stderr, seconds from SIGTERM to exit)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "svc.py"
    script.write_text(
        "import threading\n"
        "from starlette.applications import Starlette\n"
        "from casestream.service.process import ServiceProcess\n"
        + workers_src +
        f"raise SystemExit(ServiceProcess(name='t', app=Starlette(), host='127.0.0.1', port={port},"
        f" workers={workers}, shutdown_timeout_s={shutdown_timeout_s}).run())\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    return proc.returncode, out, err, time.monotonic() - started


def test_sigterm_stops_workers_and_exits_zero(tmp_path: Path) -> None:
    status, out, err, _ = _sigterm_service(
        tmp_path, "def worker(stop):\n    stop.wait()\n    print('worker flushed', flush=True)\n",
        "{'w': worker}")
    assert status == 0, err
    assert "worker flushed" in out


def test_workers_that_do_not_stop_in_time_share_one_budget_and_make_the_status_1(
        tmp_path: Path) -> None:
    """SIGTERM; two workers ignore stop: the process waits ONE shutdown budget (not one per
    worker), says which workers were left running, and does not exit 0."""
    status, _, err, took = _sigterm_service(
        tmp_path, "def deaf(stop):\n    threading.Event().wait(60)\n", "{'a': deaf, 'b': deaf}",
        shutdown_timeout_s=2.0)
    assert status == 1, err
    assert took < 3.5  # one 2 s budget for both, not 2 s each
    assert "stopped with worker(s) still running: t.a, t.b" in err
    assert "stopped cleanly" not in err


def test_consumer_config_carries_the_session_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_KAFKA_SESSION_TIMEOUT_MS", "6000")
    config = CommonSettings().consumer_config()
    assert config["session.timeout.ms"] == 6000
    assert config["heartbeat.interval.ms"] == 2000
    assert config["bootstrap.servers"] == CommonSettings().kafka_bootstrap


@pytest.mark.parametrize("module, cls", [
    ("services.case.settings", "CaseSettings"), ("services.audit.settings", "AuditSettings"),
    ("services.saga.settings", "SagaSettings"), ("services.decision.settings", "DecisionSettings"),
    ("services.notification.settings", "NotificationSettings")])
def test_a_service_setting_is_read_only_from_its_own_prefix(
    monkeypatch: pytest.MonkeyPatch, module: str, cls: str
) -> None:
    import importlib

    settings_cls = getattr(importlib.import_module(module), cls)
    monkeypatch.setenv("CASESTREAM_PORT", "1234")
    monkeypatch.setenv("CASESTREAM_DATABASE", "somebody_elses")
    settings = settings_cls()
    assert settings.port != 1234
    assert settings.database != "somebody_elses"
    service = module.split(".")[1].upper()
    monkeypatch.setenv(f"CASESTREAM_{service}_PORT", "1234")
    assert settings_cls().port == 1234
