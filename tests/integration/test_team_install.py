"""A team's deployment: the platform's wheel, the team's package and the contracts of the team
whose events it reads, nothing of the suite's services.

Builds the wheels (``tests.support.wheels``: the platform, the suite's contracts, the suite,
``examples/watch``) and installs only ``casestream[service]``, ``casestream-suite-schemas`` (the
case team's schemas and upcasters: watch reads ``CaseOpened``) and ``acme-watch`` into a fresh
venv, then runs the watch process and the operator's commands from there, in a working directory outside the checkout and without
``PYTHONPATH``, against the running infrastructure, with watch on a database of its own and
free ports:

- ``casestream settings`` and ``casestream migrate`` know watch alone (migrate creates its
  tables in the database the team provisioned; a second run is "up to date");
- with the watch service running, ``casestream status`` shows one service, ready, and exits 0;
- ``casestream dlq list`` names watch's consumers as the discovered ones;
- ``casestream console`` starts and its Flow page shows watch and no suite service.

The watch process finds the case team's schemas folder by discovery
(``casestream.service.schema_folder("suite")``) in the contracts' package installed there.
Slow (four wheel builds and a venv): marked ``integration`` and ``wheel``.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from casestream.migrations import create_database
from casestream.service import CommonSettings
from casestream.testing.relay import free_port
from tests.support.wheels import REPO, Venv, build_wheels, clean_env, ok, run, wheelhouse

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(420)]

SUITE = ("audit", "case", "decision", "notification", "saga")
SUITE_CONSUMERS = ("audit.journal", "case.saga-requests", "saga.orchestrator", "notification.requests")


class Team:
    """The fresh venv (platform + the suite's contracts + watch) and the environment its commands
    run with."""

    def __init__(self, venv: Venv, env: dict[str, str], database: str):
        self.venv, self.env, self.database = venv, env, database

    def casestream(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run([self.venv.casestream, *args], self.venv.cwd, timeout, self.env)

    def ok(self, *args: str) -> str:
        done = self.casestream(*args)
        assert done.returncode == 0, f"casestream {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, registry_url: str,
         pg_url: str) -> Iterator[Team]:
    work = tmp_path_factory.mktemp("team-install")
    house = wheelhouse(work)
    wheels = build_wheels(work)
    cwd = work / "ops"
    cwd.mkdir()
    venv = Venv(work / "venv", house, cwd)
    venv.pip_install(f"casestream[service] @ {wheels.platform.as_uri()}", wheels.contracts, wheels.watch)
    installed = venv.distributions()
    assert {"acme-watch", "casestream", "casestream-suite-schemas"} <= installed, installed
    assert "casestream-suite" not in installed, installed
    database = f"watch_team_{uuid.uuid4().hex[:8]}"
    env = {"CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_PG_URL": pg_url, "CASESTREAM_WATCH_DATABASE": database,
           "CASESTREAM_WATCH_PORT": str(free_port()), "CASESTREAM_CONSOLE_PORT": str(free_port())}
    # provisioned by the team's operators (the dev stack does it locally; migrate does not)
    create_database(CommonSettings(pg_url=pg_url).database_url(database))
    try:
        yield Team(venv, env, database)
    finally:
        with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture(scope="module")
def watch_running(team: Team, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The watch service, from the team's venv (no checkout on its path), on the team's database
    and port; its base URL once ready."""
    log = tmp_path_factory.mktemp("watch-log") / "watch.log"
    base = f"http://127.0.0.1:{team.env['CASESTREAM_WATCH_PORT']}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([team.venv.python, "-m", "watch"], env=clean_env(team.env), stdout=out,
                                stderr=subprocess.STDOUT, cwd=team.venv.cwd)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_the_case_teams_schemas_come_from_its_contracts_package(team: Team) -> None:
    script = ("from casestream.service import schema_folder; import watch; "
              "print(schema_folder('suite')); print(watch.__file__)")
    folder, module = ok([team.venv.python, "-c", script], team.venv.cwd, env=team.env).stdout.split()
    site = str(team.venv.path)
    assert folder.startswith(site) and folder.endswith("casestream_suite_schemas"), folder
    assert module.startswith(site) and not module.startswith(str(REPO)), module


def test_settings_name_watch_alone(team: Team) -> None:
    out = team.ok("settings")
    assert "CASESTREAM_WATCH_PORT" in out and "service watch (watch.settings:WatchSettings)" in out
    for svc in SUITE:
        assert f"CASESTREAM_{svc.upper()}_" not in out, svc
    done = team.casestream("settings", "case")
    assert done.returncode == 2 and "installed: watch" in done.stderr, done.stderr


def test_migrate_migrates_watch_alone(team: Team) -> None:
    out = team.ok("migrate")
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("watch: applied "), out
    assert team.ok("migrate").strip() == "watch: up to date"


def test_status_shows_watch_alone_and_exits_0(team: Team, watch_running: str) -> None:
    out = team.ok("status", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["service"] for r in rows] == ["watch"], rows
    assert rows[0]["ready"] == "ready", rows
    assert team.ok("status").count("watch") >= 1


def test_dlq_list_discovers_watch_consumers_alone(team: Team) -> None:
    rows = [json.loads(line) for line in team.ok("dlq", "list", "--json").splitlines()]
    discovered = {r["consumer"] for r in rows if r["discovered"]}
    assert discovered == {"watch.cases", "watch.triggers"}, rows


def test_console_flow_page_shows_watch_alone(team: Team, watch_running: str, tmp_path: Path) -> None:
    token = team.ok("token", "--tenant", "tenant-a", "--role", "supervisor", "--role", "operator").strip()
    base = f"http://127.0.0.1:{team.env['CASESTREAM_CONSOLE_PORT']}"
    log = tmp_path / "console.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([team.venv.casestream, "console"], env=clean_env(team.env),
                                cwd=team.venv.cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        page = httpx.get(f"{base}/flow", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert page.status_code == 200, page.text[:2000]
        assert "watch" in page.text
        for name in SUITE_CONSUMERS:
            assert name not in page.text, name
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
