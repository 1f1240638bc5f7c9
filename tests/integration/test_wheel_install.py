"""casestream installs from its wheel: built from this checkout, installed into a fresh venv.

No servers, but slow (four wheel builds, a venv, three installs): marked ``integration`` and
``wheel``, deselect with ``-m "not wheel"``. The wheels and the wheelhouse of the pinned
runtime packages come from ``tests.support.wheels``; the installs use ``--no-index``. Every
command runs with the working directory outside the checkout and without ``PYTHONPATH``, so
what is imported is what the wheel installed.

Checks, on the base install (the schema gate): ``casestream --version``; ``casestream schemas
check`` passes on the repository's schemas once the suite's contracts wheel
(``casestream-suite-schemas``, which needs no ``service`` extra) provides the upcaster module the
catalog names, and on a team's repository of another layout (an upcaster module that does not
import is exit 2, one line); another command, and ``--registry``, print one line naming the
``service`` extra and exit 2. The platform's wheel holds no suite: no ``services`` package, no
entry point but the ``casestream`` script; the contracts' wheel holds the catalog, every schema
file and the upcasters, and registers the ``suite`` schemas folder; the suite's wheel holds its
services and no schemas. Then, with ``casestream[service]`` and the suite's own wheel
(``casestream-suite``): the installed suite finds its schemas and every service's migrations in
site-packages.
"""

from __future__ import annotations

import shutil
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.wheels import REPO, Venv, Wheels, build_wheels, ok, run, wheelhouse

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(300)]

SERVICES = ("audit", "case", "decision", "notification", "saga")
HINT = "pip install 'casestream[service]'"
_run, _ok = run, ok


class Installed(Venv):
    wheels: Wheels
    timings: dict[str, float]

    @property
    def wheel(self) -> Path:
        return self.wheels.platform


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel-install")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    house = wheelhouse(work)
    timings["wheelhouse"] = time.monotonic() - t0

    t0 = time.monotonic()
    wheels = build_wheels(work)
    timings["build"] = time.monotonic() - t0

    t0 = time.monotonic()
    inst = Installed(work / "venv", house, work)
    inst.wheels = wheels
    inst.pip_install(wheels.platform)
    timings["venv+base"] = time.monotonic() - t0
    inst.timings = timings
    yield inst
    print("wheel install timings (s):", {k: round(v, 1) for k, v in inst.timings.items()})


def test_the_platform_wheel_holds_no_suite(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheels.platform).namelist()
    assert {n.split("/")[0] for n in names} == {"casestream", "casestream-0.1.0.dist-info"}, names
    (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(installed.wheels.platform).read(entry).decode()
    assert text.split() == ["[console_scripts]", "casestream", "=", "casestream.cli:main"], text
    suite = zipfile.ZipFile(installed.wheels.suite).namelist()
    assert {n.split("/")[0] for n in suite} == {"services", "casestream_suite-0.1.0.dist-info"}
    assert not [n for n in suite if n.endswith((".avsc", "catalog.toml", "upcasters.py"))], suite
    entry = zipfile.ZipFile(installed.wheels.suite).read("casestream_suite-0.1.0.dist-info/entry_points.txt").decode()
    assert "[casestream.services]" in entry and "casestream.schemas" not in entry, entry
    meta = zipfile.ZipFile(installed.wheels.suite).read("casestream_suite-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: casestream-suite-schemas" in meta.splitlines(), meta


def test_the_contracts_wheel_holds_the_schemas_and_upcasters_alone(installed: Installed) -> None:
    wheel = zipfile.ZipFile(installed.wheels.contracts)
    names, info = wheel.namelist(), "casestream_suite_schemas-0.1.0.dist-info"
    assert {n.split("/")[0] for n in names} == {"casestream_suite_schemas", info}, names
    on_disk = {f"casestream_suite_schemas/{p.relative_to(REPO / 'schemas').as_posix()}"
               for p in (REPO / "schemas").rglob("*") if p.suffix == ".avsc"}
    shipped = {n for n in names if not n.startswith(info)}
    assert shipped == on_disk | {"casestream_suite_schemas/__init__.py", "casestream_suite_schemas/catalog.toml",
                                 "casestream_suite_schemas/upcasters.py"}, sorted(shipped ^ on_disk)
    entry = wheel.read(f"{info}/entry_points.txt").decode()
    assert entry.split() == ["[casestream.schemas]", "suite", "=", "casestream_suite_schemas:schemas_dir"], entry
    requires = [line for line in wheel.read(f"{info}/METADATA").decode().splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: casestream"], requires


def test_base_install_is_light(installed: Installed) -> None:
    names = installed.distributions()
    assert {"casestream", "fastavro", "avro", "click"} <= names
    assert not names & {"confluent-kafka", "psycopg", "pydantic", "httpx", "starlette"}, names


def test_version(installed: Installed) -> None:
    done = _ok([installed.casestream, "--version"], installed.cwd)
    assert done.stdout.strip() == "casestream 0.1.0"
    done = _ok([installed.python, "-m", "casestream", "--version"], installed.cwd)
    assert done.stdout.strip() == "casestream 0.1.0"


def test_schemas_check_runs_on_the_base_install(installed: Installed) -> None:
    # the catalog's upcaster module is the contracts package's, not a file beside the folder
    done = _run([installed.casestream, "schemas", "check", "--schemas-dir", REPO / "schemas"], installed.cwd)
    assert done.returncode == 2 and "casestream_suite_schemas.upcasters" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    installed.pip_install(installed.wheels.contracts)  # on the base install: no service extra
    names = installed.distributions()
    assert "casestream-suite-schemas" in names and not names & {"confluent-kafka", "psycopg", "pydantic"}, names
    done = _run([installed.casestream, "schemas", "check", "--schemas-dir", REPO / "schemas"], installed.cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "schemas check ok" in done.stdout
    # the installed copy (site-packages) is checked alike
    folder = _ok([installed.python, "-c", "import casestream_suite_schemas as c; print(c.schemas_dir())"],
                 installed.cwd).stdout.strip()
    assert "site-packages" in folder, folder
    done = _run([installed.casestream, "schemas", "check", "--schemas-dir", folder], installed.cwd)
    assert done.returncode == 0 and "schemas check ok" in done.stdout, done.stdout + done.stderr
    # Without a configuration here: exit 2, never the catalog shipped in the wheel.
    done = _run([installed.casestream, "schemas", "check"], installed.cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no casestream-schemas.toml" in done.stderr and "Traceback" not in done.stderr


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


def test_the_suite_wheel_finds_schemas_and_migrations_in_site_packages(installed: Installed) -> None:
    # Runs last in this module: it adds the service extra and the suite to the venv the tests above share.
    t0 = time.monotonic()
    installed.pip_install(f"casestream[service] @ {installed.wheel.as_uri()}", installed.wheels.contracts,
                          installed.wheels.suite)
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
