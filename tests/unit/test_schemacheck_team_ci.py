"""The schema gate in a team's repository CI: its upcaster module imported from the repository.

A team's ``casestream-schemas.toml`` names its upcaster chain (``upcasters = "pkg.mod:fn"``),
code of the team's own package, which CI has not installed and whose folder a console script
does not put on ``sys.path``. Run as CI runs it: the ``casestream`` console script in a
subprocess (no test-runner ``sys.path``), the pre-commit hooks' entries, and the GitHub
Action's ``run:`` scripts with the environment the action gives them, in a temporary git
repository and a temporary virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

CHAIN = '''
from casestream.events.upcasting import UpcasterChain
IMPORTS


def upcasters() -> UpcasterChain:
    chain = UpcasterChain()
    chain.add("OrderPlaced", 1, lambda p: {**p, "channel": "web"})
    return chain
'''


def order(version: int) -> str:
    fields = [{"name": "order_id", "type": "string"}]
    if version > 1:
        fields.append({"name": "channel", "type": "string", "default": "web"})
    return json.dumps({"type": "record", "name": "OrderPlaced", "namespace": "com.acme.orders", "fields": fields})


def team_repo(root: Path, *, src: bool = False, imports: str = "", python_path: str = "") -> str:
    """A team repository: schemas, a package holding the chain (at the root or under src/), its
    pyproject; returns the package name (fresh per test: the gate caches a chain per reference)."""
    package = f"acme_orders_{uuid.uuid4().hex[:12]}"
    pkg = root / "src" / package if src else root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "upcasting.py").write_text(CHAIN.replace("IMPORTS", imports))
    (root / "avro").mkdir()
    (root / "avro" / "OrderPlaced.v1.avsc").write_text(order(1))
    (root / "avro" / "OrderPlaced.v2.avsc").write_text(order(2))
    (root / "casestream-schemas.toml").write_text(
        f'upcasters = "{package}.upcasting:upcasters"\n{python_path}\n[[folders]]\npath = "avro"\n')
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{package.replace('_', '-')}"
        version = "0.1.0"
        """) + ('\n[tool.setuptools.packages.find]\nwhere = ["src"]\n' if src else ""))
    return package


def gate(cwd: Path, *args: str, bin_dir: Path = BIN) -> subprocess.CompletedProcess[str]:
    """``casestream schemas check`` as CI runs it: the console script, a clean environment."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(bin_dir / "casestream"), "schemas", "check", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_upcaster_package_at_the_repository_root_is_imported(tmp_path: Path) -> None:
    root = tmp_path / "team"
    root.mkdir()
    team_repo(root)
    done = gate(root)
    assert done.returncode == 0, done.stdout + done.stderr
    # from another folder, --config: the configuration's folder is where the package is found
    done = gate(tmp_path, "--config", "team/casestream-schemas.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    # the chain is really read: without the step v1->v2 the rule fires
    (root / "avro" / "OrderPlaced.v3.avsc").write_text(order(2).replace('"web"}', '"web"}, {"name": "x", '
                                                                                 '"type": "int", "default": 0}'))
    done = gate(root)
    assert done.returncode == 1 and "upcaster-missing" in done.stdout, done.stdout + done.stderr


def test_a_src_layout_needs_python_path_and_the_error_says_so(tmp_path: Path) -> None:
    root = tmp_path / "team"
    root.mkdir()
    package = team_repo(root, src=True)
    done = gate(root)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    (line,) = lines
    assert f"{package}.upcasting" in line and "upcasters" in line, line
    assert "pip install -e ." in line and "python_path" in line and "--python-path" in line, line
    assert gate(root, "--python-path", "src").returncode == 0
    cfg = root / "casestream-schemas.toml"
    cfg.write_text('python_path = ["src"]\n' + cfg.read_text())
    done = gate(root)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_dependency_of_the_upcaster_module_that_is_not_installed_is_named(tmp_path: Path) -> None:
    root = tmp_path / "team"
    root.mkdir()
    package = team_repo(root, imports="import acme_missing_dependency  # noqa: F401")
    done = gate(root)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{package}.upcasting" in done.stderr and "acme_missing_dependency" in done.stderr
    assert "pip install -e ." in done.stderr and "python_path" not in done.stderr, done.stderr


def test_python_path_must_be_a_list_of_folders(tmp_path: Path) -> None:
    root = tmp_path / "team"
    root.mkdir()
    team_repo(root, python_path='python_path = "src"')
    done = gate(root)
    assert done.returncode == 2 and "python_path" in done.stderr, done.stderr
    cfg = root / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text().replace('python_path = "src"', 'python_path = ["nowhere"]'))
    done = gate(root)
    assert done.returncode == 2 and "python_path" in done.stderr and "nowhere" in done.stderr, done.stderr


def test_pre_commit_hooks_python_and_system(tmp_path: Path) -> None:
    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert hooks["casestream-schemas-check"]["language"] == "python"
    system = hooks["casestream-schemas-check-system"]
    assert system["language"] == "system" and system["pass_filenames"] is False
    root = tmp_path / "team"
    root.mkdir()
    team_repo(root)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for hook in hooks.values():
        assert re.search(hook["files"], "avro/OrderPlaced.v2.avsc") and re.search(hook["files"], "pyproject.toml")
        done = subprocess.run(hook["entry"].split(), cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


# --- the GitHub Action's run: scripts ---------------------------------------------------------

def action_steps() -> dict[str, dict]:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    return {s.get("name", s.get("uses", "")): s for s in action["runs"]["steps"]}


def run_step(step: dict, inputs: dict[str, str], cwd: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    """A composite step's ``run:`` as the runner runs it: bash, its ``env:`` with the inputs
    substituted, in its ``working-directory``."""
    def sub(text: str) -> str:
        return re.sub(r"\$\{\{\s*inputs\.([a-z-]+)\s*\}\}", lambda m: inputs.get(m.group(1), ""), text)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({k: sub(str(v)) for k, v in step.get("env", {}).items()})
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_NO_INDEX"] = "1"  # nothing from the network: the team package alone is installed
    workdir = cwd / sub(step.get("working-directory", "."))
    assert step["shell"] == "bash" and "${{" not in sub(step["run"]), step["run"]
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A virtualenv that sees this checkout's packages (pip, setuptools and the gate, through a
    .pth line adding them as a site folder) and has its own ``casestream`` script: what the
    action's setup-python and gate install steps leave. A package installed into it stays there."""
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=300)
    (site,) = (path / "lib").glob("python3*/site-packages")
    our_site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "checkout.pth").write_text(f"import site; site.addsitedir({our_site!r})\n")
    script = path / "bin" / "casestream"
    script.write_text(f"#!{path / 'bin' / 'python'}\nimport sys\nfrom casestream.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return path


def build_wheel(root: Path, package: str) -> str:
    """``dist/<package>-0.1.0-py3-none-any.whl`` of ``src/<package>`` (PEP 427 layout, by hand:
    no build backend needed); returns its path relative to ``root``."""
    name = f"{package}-0.1.0"
    files = {f"{package}/{p.name}": p.read_bytes() for p in (root / "src" / package).glob("*.py")}
    files[f"{name}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n".encode()
    files[f"{name}.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},,\n" for path in files) + f"{name}.dist-info/RECORD,,\n"
    files[f"{name}.dist-info/RECORD"] = record.encode()
    (root / "dist").mkdir()
    rel = f"dist/{name}-py3-none-any.whl"
    with zipfile.ZipFile(root / rel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return rel


def git_repo(root: Path) -> None:
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "schemas"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c",
                        "init.defaultBranch=main", *args], cwd=root, check=True, capture_output=True)


def test_action_installs_the_repository_package_then_checks(tmp_path: Path, venv: Path) -> None:
    steps = action_steps()
    assert "github.action_path" in steps["Install the schema gate"]["run"]
    root = tmp_path / "team"
    root.mkdir()
    package = team_repo(root, src=True)
    git_repo(root)
    # offline here (no index, no build backend's wheel package): the team's wheel stands in for "-e ."
    wheel = build_wheel(root, package)
    inputs = {"working-directory": ".", "install": f"--no-deps {wheel}", "against": "HEAD",
              "config": "", "args": "", "python-path": ""}
    check = run_step(steps["Check the schemas"], inputs, root, venv)
    assert check.returncode == 2 and f"{package}.upcasting" in check.stderr, check.stdout + check.stderr
    install = run_step(steps["Install the repository's package"], inputs, root, venv)
    assert install.returncode == 0, install.stdout + install.stderr
    check = run_step(steps["Check the schemas"], inputs, root, venv)
    assert check.returncode == 0, check.stdout + check.stderr
    (root / "avro" / "OrderPlaced.v2.avsc").write_text(order(2).replace('"default": "web"', '"default": "app"'))
    check = run_step(steps["Check the schemas"], inputs, root, venv)
    assert check.returncode == 1 and "::error file=avro/OrderPlaced.v2.avsc" in check.stdout, check.stdout


def test_action_python_path_input_without_installing(tmp_path: Path, venv: Path) -> None:
    steps = action_steps()
    root = tmp_path / "checkout" / "team"
    root.mkdir(parents=True)
    team_repo(root, src=True)
    git_repo(root)
    inputs = {"working-directory": "team", "install": "", "against": "", "config": "", "args": "",
              "python-path": "src"}
    install = run_step(steps["Install the repository's package"], inputs, root.parent, venv)
    assert install.returncode == 0 and "pip" not in install.stdout + install.stderr
    check = run_step(steps["Check the schemas"], inputs, root.parent, venv)
    assert check.returncode == 0, check.stdout + check.stderr
