"""End-to-end: a team's path outside this repository, as docs/new-service.md tells it.

The guide's block marked ``<!-- team-path ... -->`` (section 11, "In a project of your own")
is run line by line, verbatim, in one bash session in a temporary folder outside the
checkout: a venv, ``pip install 'casestream[service]'`` (the platform's wheel built from this
checkout: ``PIP_NO_INDEX`` + ``PIP_FIND_LINKS`` point pip at it, at the pinned runtime wheels
and at the build tools), ``casestream new service orders``, the skeleton installed, its
topics applied, the dev stack started in the background (every installed schemas folder
registered, the database created), an HTTP command, ``status``, ``replay``, ``dlq list`` and
the dev stack stopped. Between the lines the test only waits and looks:

- the command's item reaches the projection through outbox -> relay -> topic -> consumer
  (``GET /orders/items/{id}`` answers it, and its row is in the ``orders`` database);
- ``casestream status`` shows ``orders`` alone and ready; ``dlq list`` discovers its consumer
  alone; the suite is not installed in the venv;
- after ``casestream replay orders.items`` the projection's rows are the same (but for
  ``applied_at``, the time a row was written);
- the dev stack registered the skeleton's subject in the registry;
- then another package whose schemas folder defines the skeleton's subject differently is
  installed: ``python -m casestream.service.devstack run`` exits 1 with one line naming the
  subject and both folders, and starts nothing.

State a run leaves (the ``orders`` database, the topic ``outbox.event.orders``, the consumer
group ``orders.items``) is removed first, so the replay rebuilds from this run's history
alone. Ports 18562 (orders) and 18100 (the console) must be free: run under the e2e lock
(``flock /tmp/casestream-e2e.lock``) beside other stacks on the shared infrastructure.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from casestream.auth import dev_token
from tests.support.wheels import REPO, build_tools, build_wheels, wheelhouse

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(900)]

GUIDE = REPO / "docs" / "new-service.md"
NAME, PORT, CONSOLE_PORT = "orders", 18562, 18100
TOPIC, GROUP, TABLE = "outbox.event.orders", "orders.items", "item_views"


def guide_lines() -> list[str]:
    """The commands of the guide's team-path block, continuation lines joined."""
    text = GUIDE.read_text(encoding="utf-8")
    m = re.search(r"<!-- team-path[^>]*-->\n```sh\n(?P<body>.*?)\n```", text, re.S)
    assert m, "docs/new-service.md has no <!-- team-path --> block"
    return m["body"].replace("\\\n", " ").splitlines()


class Shell:
    """One bash session (its own process group); :meth:`run` sends a line and returns its
    exit status and output once it finished."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, command: str, timeout: float) -> tuple[int, str]:
        assert self.proc.stdin is not None
        marker = f"__done_{uuid.uuid4().hex}__"
        self.proc.stdin.write(f"{command}\n__rc=$?; echo; echo {marker} $__rc\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{command!r} did not finish in {timeout:.0f} s:\n{''.join(out)}") from None
            if line is None:
                raise AssertionError(f"the shell exited during {command!r}:\n{''.join(out)}")
            if line.startswith(marker):
                return int(line.split()[1]), "".join(out).rstrip("\n")
            out.append(line)

    def close(self) -> None:
        """End the session and whatever it left running (its process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.pump.join(10)  # it ends at the end of the output, once the group is gone
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _forget_earlier_runs(kafka_bootstrap: str, pg_url: str) -> None:
    with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in (TOPIC, f"{GROUP}.dlq") if t in existing]
    for future in admin.delete_topics(doomed, operation_timeout=30).values() if doomed else ():
        future.result()
    for attempt in range(20):
        try:
            for future in admin.delete_consumer_groups([GROUP], request_timeout=15).values():
                future.result()
        except Exception as e:  # noqa: BLE001 - a group that does not exist is what we want
            if "GROUP_ID_NOT_FOUND" in str(e) or "does not exist" in str(e).lower():
                break
            # the group coordinator moves or loads on a young broker: ask again
            if "COORDINATOR" not in str(e) or attempt == 19:
                raise
            time.sleep(0.5)
            continue
        break
    deadline = time.monotonic() + 30
    while TOPIC in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)


def _rows(pg_url: str) -> list[tuple[object, ...]]:
    """The projection's rows, every column but ``applied_at``, in key order."""
    with psycopg.connect(f"{pg_url}/{NAME}") as conn:
        columns = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND column_name <> 'applied_at' ORDER BY ordinal_position", (TABLE,))]
        assert columns, f"no table {TABLE} in database {NAME}"
        listed = ", ".join(f'"{c}"' for c in columns)
        return [tuple(r) for r in conn.execute(f'SELECT {listed} FROM "{TABLE}" ORDER BY 1')]


@pytest.fixture()
def shell(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, registry_url: str,
          pg_url: str) -> Iterator[Shell]:
    for port in (PORT, CONSOLE_PORT):
        assert _port_free(port), (f"port {port} is in use: another stack is running (run the e2e "
                                  f"tests under flock /tmp/casestream-e2e.lock)")
    work = tmp_path_factory.mktemp("team-path")
    finds = [build_wheels(work, "").platform.parent, wheelhouse(work), build_tools(work)]
    _forget_earlier_runs(kafka_bootstrap, pg_url)
    project = work / "project"
    project.mkdir()
    assert not project.is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("CASESTREAM_")}
    env.update(CASESTREAM_KAFKA_BOOTSTRAP=kafka_bootstrap, CASESTREAM_REGISTRY_URL=registry_url,
               CASESTREAM_PG_URL=pg_url, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_FIND_LINKS=" ".join(map(str, finds)))
    session = Shell(project, env)
    try:
        yield session
    finally:
        session.close()


def test_the_team_path_of_the_guide(shell: Shell, kafka_bootstrap: str, registry_url: str,
                                    pg_url: str) -> None:
    lines = guide_lines()
    assert any("devstack run" in line for line in lines) and any("casestream replay" in line for line in lines)
    outputs: dict[str, str] = {}
    before: list[tuple[object, ...]] = []
    for line in lines:
        rc, out = shell.run(line, timeout=300)
        assert rc == 0, f"docs/new-service.md team path: {line!r} exited {rc}:\n{out}"
        outputs[line] = out
        if line.startswith("curl "):
            item = json.loads(out.strip().splitlines()[-1] if out.strip() else "{}")
            assert item.get("title") == "first item", out
            before = _wait_projected(item["item_id"], pg_url)
        elif line.startswith("casestream status"):
            assert re.search(rf"^{NAME}\s+ready", out, re.M), out
            for suite in ("case", "audit", "saga", "decision", "notification", "watch"):
                assert not re.search(rf"^{suite}\s", out, re.M), out
        elif line.startswith("casestream replay"):
            assert _rows(pg_url) == before, "the replayed projection differs from the live one"
        elif line.startswith("casestream dlq list"):
            consumers = [row.split()[0] for row in out.splitlines()[:-1]
                         if "not a consumer of a discovered service" not in row]
            assert consumers == [GROUP], out
        elif line.startswith("pip install -e"):
            rc, listed = shell.run("pip list --format=freeze", timeout=60)
            names = {row.split("==")[0].lower() for row in listed.splitlines()}
            assert {"casestream", NAME} <= names and "casestream-suite" not in names, listed
            assert "acme-watch" not in names, listed
    subjects = httpx.get(f"{registry_url}/subjects", timeout=10).json()
    assert f"{NAME}.{NAME}.OrdersCreated" in subjects, subjects
    assert _port_free(PORT), "kill %1 && wait left the orders service running"
    _a_clashing_folder_stops_the_dev_stack(shell)


CLASH_PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "clash"
version = "0.1.0"
dependencies = ["casestream"]

[project.entry-points."casestream.schemas"]
clash = "clash:schemas_dir"

[tool.setuptools]
packages = ["clash"]

[tool.setuptools.package-data]
clash = ["schemas/*.toml", "schemas/*.avsc", "schemas/*/*.avsc"]
"""

CLASH_INIT = """
from importlib.resources import files
from pathlib import Path


def schemas_dir() -> Path:
    return Path(str(files("clash") / "schemas"))
"""


def _a_clashing_folder_stops_the_dev_stack(shell: Shell) -> None:
    """Another installed package whose folder defines the skeleton's subject differently: the
    dev stack refuses to start, in one line naming the subject and both folders."""
    rc, here = shell.run("pwd", timeout=10)
    project = Path(here.strip())
    clash = project.parent / "clash"
    (clash / "clash").mkdir(parents=True)
    (clash / "pyproject.toml").write_text(CLASH_PYPROJECT)
    (clash / "clash" / "__init__.py").write_text(CLASH_INIT)
    shutil.copytree(project / "schemas", clash / "clash" / "schemas", ignore=shutil.ignore_patterns("*.py"))
    avsc = clash / "clash" / "schemas" / NAME / "OrdersCreated.v1.avsc"
    doc = json.loads(avsc.read_text())
    doc["fields"].append({"name": "colour", "type": "string"})
    avsc.write_text(json.dumps(doc))
    rc, out = shell.run("pip install -q -e ../clash", timeout=180)
    assert rc == 0, out
    rc, out = shell.run("python -m casestream.service.devstack run --no-console", timeout=120)
    assert rc == 1, out
    assert _port_free(PORT), "the dev stack started a service despite the clash"
    errors = [line for line in out.splitlines() if line.startswith("run: ")]
    assert len(errors) == 1, out
    assert f"subject {NAME}.{NAME}.OrdersCreated" in errors[0], out
    assert str(project / "schemas") in errors[0] and str(clash / "clash" / "schemas") in errors[0], out
    rc, out = shell.run("pip uninstall -q -y clash", timeout=60)
    assert rc == 0, out


def _wait_projected(item_id: str, pg_url: str) -> list[tuple[object, ...]]:
    """Wait until the item is served from the projection; the projection's rows then."""
    token = dev_token("tenant-a", ("officer",), subject="team-path")
    deadline = time.monotonic() + 60
    last = ""
    while time.monotonic() < deadline:
        answer = httpx.get(f"http://127.0.0.1:{PORT}/{NAME}/items/{item_id}",
                           headers={"Authorization": f"Bearer {token}"}, timeout=5)
        if answer.status_code == 200:
            rows = _rows(pg_url)
            assert any(item_id in map(str, row) for row in rows), rows
            return rows
        last = f"{answer.status_code} {answer.text[:300]}"
        time.sleep(0.3)
    raise AssertionError(f"item {item_id} never reached the projection: {last}")
