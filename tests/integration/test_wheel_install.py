"""casestream installs from its wheel: built from this checkout, installed into a fresh venv.

No servers, but slow (a wheel build, a venv, two installs): marked ``integration`` and
``wheel``, deselect with ``-m "not wheel"``. The dependencies come from a wheelhouse of the
pinned runtime packages (``requirements.lock``), downloaded once per lock content into the
temporary directory (``CASESTREAM_WHEELHOUSE`` overrides the folder); the installs themselves
use ``--no-index``. Every command runs with the working directory outside the checkout and
without ``PYTHONPATH``, so what is imported is what the wheel installed.

Checks, on the base install (the schema gate): ``casestream --version``; ``casestream schemas
check`` passes on the repository's schemas and on a team's repository of another layout (an
upcaster module that does not import is exit 2, one line); another command, and ``--registry``, print one
line naming the ``service`` extra and exit 2. Then, with ``casestream[service]``: the
installed suite finds its schemas and every service's migrations in site-packages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.wheel, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("audit", "case", "decision", "notification", "saga")
HINT = "pip install 'casestream[service]'"
_NOT_SOURCE = (".git", ".venv", ".local", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
               "target")


def _run(args: list[str | Path], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _ok(args: list[str | Path], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    done = _run(args, cwd, timeout)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _wheelhouse(work: Path) -> Path:
    lock = (REPO / "requirements.lock").read_bytes()
    default = Path(tempfile.gettempdir()) / f"casestream-wheelhouse-{hashlib.sha256(lock).hexdigest()[:12]}"
    folder = Path(os.environ.get("CASESTREAM_WHEELHOUSE", default))
    if not (folder / ".complete").is_file():
        _ok([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", folder,
             "-r", REPO / "requirements.lock"], work)
        (folder / ".complete").touch()
    return folder


class Installed:
    def __init__(self, venv: Path, wheel: Path, wheelhouse: Path, cwd: Path):
        self.venv, self.wheel, self.wheelhouse, self.cwd = venv, wheel, wheelhouse, cwd
        self.python = venv / "bin" / "python"
        self.casestream = venv / "bin" / "casestream"
        self.timings: dict[str, float] = {}

    def pip_install(self, requirement: str) -> None:
        _ok([self.python, "-m", "pip", "install", "-q", "--no-index", "--find-links", self.wheelhouse,
             requirement], self.cwd)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel-install")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    wheelhouse = _wheelhouse(work)
    timings["wheelhouse"] = time.monotonic() - t0

    t0 = time.monotonic()
    # From a copy: setuptools builds in the source tree, and a stale build/ there would
    # put files into the wheel that the current pyproject.toml no longer ships.
    source = work / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    _ok([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", source], work)
    (wheel,) = (work / "dist").glob("casestream-*.whl")
    timings["build"] = time.monotonic() - t0

    t0 = time.monotonic()
    _ok([sys.executable, "-m", "venv", work / "venv"], work)  # no --system-site-packages
    inst = Installed(work / "venv", wheel, wheelhouse, work)
    inst.pip_install(str(wheel))
    timings["venv+base"] = time.monotonic() - t0
    inst.timings = timings
    yield inst
    print("wheel install timings (s):", {k: round(v, 1) for k, v in inst.timings.items()})


def test_base_install_is_light(installed: Installed) -> None:
    done = _ok([installed.python, "-m", "pip", "list", "--format=freeze"], installed.cwd)
    names = {line.split("==")[0].lower() for line in done.stdout.splitlines()}
    assert {"casestream", "fastavro", "avro", "click"} <= names
    assert not names & {"confluent-kafka", "psycopg", "pydantic", "httpx", "starlette"}, names


def test_version(installed: Installed) -> None:
    done = _ok([installed.casestream, "--version"], installed.cwd)
    assert done.stdout.strip() == "casestream 0.1.0"
    done = _ok([installed.python, "-m", "casestream", "--version"], installed.cwd)
    assert done.stdout.strip() == "casestream 0.1.0"


def test_schemas_check_runs_on_the_base_install(installed: Installed) -> None:
    done = _run([installed.casestream, "schemas", "check", "--schemas-dir", REPO / "schemas"], installed.cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "schemas check ok" in done.stdout
    # Without --schemas-dir (and no ./schemas): the catalog shipped in the wheel.
    done = _run([installed.casestream, "schemas", "check"], installed.cwd)
    assert done.returncode == 0, done.stdout + done.stderr


def test_schemas_check_of_a_team_repository_on_the_base_install(installed: Installed, tmp_path: Path) -> None:
    repo = tmp_path / "acme"
    shutil.copytree(REPO / "tests" / "fixtures" / "acme-schemas", repo)
    done = _run([installed.python, "-m", "casestream.cli", "schemas", "check", "--format", "json"], repo)
    assert done.returncode == 0, done.stdout + done.stderr
    config = repo / "casestream-schemas.toml"
    # an upcaster chain whose module needs a package the base install lacks: exit 2, one line
    config.write_text('upcasters = "pydantic.missing:chain"\n' + config.read_text())
    done = _run([installed.casestream, "schemas", "check", "--format", "github"], repo)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("::error ") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "pydantic" in done.stderr


@pytest.mark.parametrize("args", [["outbox", "status"], ["token", "--tenant", "t1", "--role", "officer"],
                                  ["status"]])
def test_other_commands_name_the_service_extra(installed: Installed, args: list[str]) -> None:
    done = _run([installed.casestream, *args], installed.cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert HINT in done.stderr


def test_schemas_check_registry_names_the_service_extra(installed: Installed) -> None:
    done = _run([installed.casestream, "schemas", "check", "--schemas-dir", REPO / "schemas",
                 "--registry", "http://127.0.0.1:9/apis/ccompat/v7"], installed.cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert HINT in done.stderr


def test_service_extra_finds_schemas_and_migrations_in_site_packages(installed: Installed) -> None:
    # Runs last in this module: it adds the service extra to the venv the tests above share.
    t0 = time.monotonic()
    installed.pip_install(f"casestream[service] @ {installed.wheel.as_uri()}")
    installed.timings["service extra"] = time.monotonic() - t0
    script = f"""
import importlib, sysconfig
from pathlib import Path
from casestream.events.catalog import load_catalog
from services import schemas_dir
site = Path(sysconfig.get_paths()["purelib"]).resolve()
schemas = schemas_dir().resolve()
assert schemas.is_relative_to(site), schemas
assert len(load_catalog(schemas_dir()).event_types) > 0
for svc in {SERVICES!r}:
    bootstrap = importlib.import_module(f"services.{{svc}}.bootstrap")
    files = [m for m in bootstrap.migrations() if isinstance(m, Path)]
    assert files, svc
    assert all(f.resolve().is_relative_to(site) and f.suffix == ".sql" for f in files), files
print("ok", schemas)
"""
    done = _ok([installed.python, "-c", script], installed.cwd)
    assert done.stdout.startswith("ok ")
