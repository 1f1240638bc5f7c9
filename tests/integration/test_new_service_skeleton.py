"""``casestream new service`` gives a package whose own tests pass as generated, with the
platform alone.

Outside the checkout, as a team would: the platform's wheel built from this checkout and
installed with its ``service`` extra into a fresh venv (no suite: ``casestream-suite`` is not
installed and ``services`` does not import); ``casestream new service inspections`` run by
that venv's console script; ``pip install -e '.[test]'`` of the generated folder; then there
its ``pytest`` (also as ``python -m pytest``, and its bootstrap imports), ``casestream schemas check --schemas-dir schemas`` and ``casestream settings
inspections`` (found through the installed entry point). Installs use ``--no-index`` with the
pinned runtime wheelhouse and the build tools (``tests/support/wheels.py``). No servers; slow
(a wheel build, a venv, three installs): marked ``integration`` and ``wheel``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.wheels import REPO, Venv, build_tools, build_wheels, ok, run, wheelhouse

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(900)]


def test_a_generated_service_passes_its_own_tests_with_the_platform_alone(tmp_path: Path) -> None:
    assert not tmp_path.is_relative_to(REPO)
    work = tmp_path / "work"
    work.mkdir()
    platform = build_wheels(work, "").platform
    venv = Venv(tmp_path / "venv", wheelhouse(work), tmp_path)
    links = ["--no-index", "--find-links", venv.wheelhouse, "--find-links", build_tools(work)]
    ok([venv.python, "-m", "pip", "install", "-q", *links, f"{platform}[service]", "pytest>=8"],
       tmp_path)
    assert "casestream-suite" not in venv.distributions()
    assert run([venv.python, "-c", "import services"], tmp_path).returncode == 1

    team = tmp_path / "team"
    team.mkdir()
    made = ok([venv.casestream, "new", "service", "inspections"], team)
    project = team / "inspections"
    assert "into inspections: " in made.stdout and (project / "pyproject.toml").is_file()
    ok([venv.python, "-m", "pip", "install", "-q", *links, "-e", ".[test]"], project)

    tests = ok([venv.path / "bin" / "pytest", "-q", "-p", "no:cacheprovider"], project)
    passed = re.search(r"(\d+) passed", tests.stdout)
    assert passed and int(passed.group(1)) >= 20, tests.stdout
    assert not re.search(r"\d+ (failed|errors?|skipped)", tests.stdout), tests.stdout

    # python -m puts the project folder first on sys.path: ./inspections is imported from
    # there, and the editable install must still map inspections.schemas to ./schemas
    again = ok([venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project)
    assert f"{passed.group(1)} passed" in again.stdout, again.stdout
    ok([venv.python, "-c", "import inspections.bootstrap"], project)

    gate = ok([venv.casestream, "schemas", "check", "--schemas-dir", "schemas"], project)
    assert gate.stdout.startswith("schemas check ok: 1 subjects"), gate.stdout
    listed = ok([venv.casestream, "settings", "inspections"], project)
    assert "CASESTREAM_INSPECTIONS_IDEMPOTENCY_PURGE_INTERVAL_S" in listed.stdout
