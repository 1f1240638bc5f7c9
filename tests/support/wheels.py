"""The wheels this repository builds, and fresh virtual environments to install them into.

``build_wheels(work)`` copies the checkout (without local state: setuptools builds in the
source tree, and a stale build/ there would put files into a wheel that the current
pyproject.toml no longer ships) and builds four wheels from the copy: the platform
(``casestream``, the root), the suite's event contracts (``casestream-suite-schemas``,
``schemas/``), the regulator suite (``casestream-suite``, ``services/``) and the example team's
package (``acme-watch``, ``examples/watch``). The builds use pip's build
isolation (setuptools from PyPI); the installs use ``--no-index`` with a wheelhouse of the
pinned runtime packages (``requirements.lock``), downloaded once per lock content into the
temporary directory (``CASESTREAM_WHEELHOUSE`` overrides the folder).

Every command runs without ``PYTHONPATH``/``VIRTUAL_ENV``, in a working directory the caller
chooses (outside the checkout), so what is imported is what the wheels installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.locks import file_lock

REPO = Path(__file__).resolve().parents[2]
_NOT_SOURCE = (".git", ".venv", ".local", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
               "target")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the Python path variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra or {})
    return env


def run(args: list[str | Path], cwd: Path, timeout: float = 240,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(env), capture_output=True,
                          text=True, timeout=timeout, check=False)


def ok(args: list[str | Path], cwd: Path, timeout: float = 240,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = run(args, cwd, timeout, env)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def wheelhouse(work: Path) -> Path:
    """The folder of the pinned runtime packages' wheels (downloaded when missing)."""
    lock = (REPO / "requirements.lock").read_bytes()
    default = Path(tempfile.gettempdir()) / f"casestream-wheelhouse-{hashlib.sha256(lock).hexdigest()[:12]}"
    folder = Path(os.environ.get("CASESTREAM_WHEELHOUSE", default))
    with file_lock(folder.with_name(folder.name + ".lock")):  # another worker may be filling it
        if not (folder / ".complete").is_file():
            ok([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", folder,
                "-r", REPO / "requirements.lock"], work)
            (folder / ".complete").touch()
    return folder


#: What building and testing a team's package needs besides the runtime pins: the build
#: backend its pyproject names (pip's build isolation) and the ``test`` extra of a skeleton.
BUILD_TOOLS = ("setuptools>=77", "wheel", "pytest>=8")


def build_tools(work: Path) -> Path:
    """The folder of :data:`BUILD_TOOLS` wheels with their dependencies (downloaded when
    missing), for installs with ``--no-index`` of a package built from source."""
    key = hashlib.sha256(" ".join(BUILD_TOOLS).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"casestream-buildtools-{key}"
    with file_lock(folder.with_name(folder.name + ".lock")):
        if not (folder / ".complete").is_file():
            ok([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", folder,
                *BUILD_TOOLS], work)
            (folder / ".complete").touch()
    return folder


@dataclass(frozen=True, slots=True)
class Wheels:
    platform: Path
    contracts: Path
    suite: Path
    watch: Path


_PATTERNS = {"": "casestream-*.whl", "schemas": "casestream_suite_schemas-*.whl",
             "services": "casestream_suite-*.whl", "examples/watch": "acme_watch-*.whl"}
_BUILT: dict[str, Path] = {}  # project -> its wheel, built once per test session


def build_wheels(work: Path, *projects: str) -> Wheels:
    """The four wheels (or only those of ``projects``: "", "schemas", "services", "examples/watch"),
    built from a copy of the checkout under ``work`` into ``work / "dist"``, once per test
    session (a later call gets the wheels built first); a wheel not built is named by its
    would-be path."""
    wanted = projects or tuple(_PATTERNS)
    missing = [p for p in wanted if p not in _BUILT]
    if missing:
        source = work / "source"
        shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
        dist = work / "dist"
        for project in missing:
            ok([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source / project], work)
            (_BUILT[project],) = dist.glob(_PATTERNS[project])
    return Wheels(*(_BUILT.get(p, work / "dist" / _PATTERNS[p]) for p in _PATTERNS))


class Venv:
    """A fresh venv (no system site-packages) at ``path``; commands run in ``cwd``."""

    def __init__(self, path: Path, wheels: Path, cwd: Path):
        ok([sys.executable, "-m", "venv", path], cwd)
        self.path, self.wheelhouse, self.cwd = path, wheels, cwd
        self.python = path / "bin" / "python"
        self.casestream = path / "bin" / "casestream"

    def pip_install(self, *requirements: str | Path) -> None:
        ok([self.python, "-m", "pip", "install", "-q", "--no-index", "--find-links", self.wheelhouse,
            *requirements], self.cwd)

    def distributions(self) -> set[str]:
        done = ok([self.python, "-m", "pip", "list", "--format=freeze"], self.cwd)
        return {line.split("==")[0].lower() for line in done.stdout.splitlines()}
