"""``casestream new service`` gives a package whose own tests pass as generated.

Outside the checkout, as a team would: ``casestream new service inspections`` into a temporary
folder, the package built and installed by pip (``--no-deps --target``: the interpreter's
environment already has casestream, and nothing is installed into it), then, in the generated
folder with only that target on ``PYTHONPATH``: its ``pytest``, ``casestream schemas check
--schemas-dir schemas`` and ``casestream settings inspections`` (found through the installed
entry point). No servers; slow (a package build): marked ``integration`` and ``wheel``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.wheel, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(args: list[str | Path], cwd: Path, site: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if site is not None:
        env["PYTHONPATH"] = str(site)
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_a_generated_service_passes_its_own_tests(tmp_path: Path) -> None:
    assert not tmp_path.is_relative_to(REPO)
    made = _run([BIN / "casestream", "new", "service", "inspections"], tmp_path)
    project = tmp_path / "inspections"
    assert "into inspections: " in made.stdout and (project / "pyproject.toml").is_file()

    site = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, project],
         tmp_path)
    assert (site / "inspections" / "schemas" / "catalog.toml").is_file()

    tests = _run([BIN / "pytest", "-q", "-p", "no:cacheprovider"], project, site)
    passed = re.search(r"(\d+) passed", tests.stdout)
    assert passed and int(passed.group(1)) >= 15, tests.stdout
    assert not re.search(r"\d+ (failed|error|skipped)", tests.stdout), tests.stdout
    # what was tested is the installed package, not the folder
    where = _run([sys.executable, "-c", "import inspections; print(inspections.__file__)"],
                 tmp_path, site)
    assert Path(where.stdout.strip()).is_relative_to(site)

    gate = _run([BIN / "casestream", "schemas", "check", "--schemas-dir", "schemas"], project, site)
    assert gate.stdout.startswith("schemas check ok: 1 subjects"), gate.stdout

    listed = _run([BIN / "casestream", "settings", "inspections"], project, site)
    assert "CASESTREAM_INSPECTIONS_PORT" in listed.stdout
