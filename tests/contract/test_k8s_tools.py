"""Contract: ``deploy/k8s/tools.sh install`` works from a user's own virtual environment.

The JSON schema generator (deploy/k8s/json_schemas.py) needs the Python standard library
alone: KEDA's CRDs (YAML) are turned into JSON by the helm the script builds. The test runs
the install into a fresh local directory (helm and kubeconform linked from ``make k8s-tools``,
so only the schemas are generated) with a new virtual environment without any package first
on PATH, and compares the schemas with those of the repository's own install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "deploy" / "k8s" / "tools.sh"


def _path(name: str) -> Path:
    proc = subprocess.run([str(TOOLS), "path", name], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"{proc.stderr.strip()} -- run `make k8s-tools`.", pytrace=False)
    return Path(proc.stdout.strip())


def test_install_generates_the_schemas_with_a_python_without_pyyaml(tmp_path: Path) -> None:
    helm, kubeconform, schemas = _path("helm"), _path("kubeconform"), _path("schemas")
    bin_dir = tmp_path / "local" / "k8s" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in (helm, kubeconform):
        (bin_dir / tool.name).symlink_to(tool)
    for stamp in helm.parent.glob(".*-v*"):  # the build stamps: nothing is rebuilt
        shutil.copy(stamp, bin_dir / stamp.name)
    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    no_yaml = subprocess.run([str(venv / "bin" / "python"), "-c", "import yaml"], capture_output=True,
                             text=True, timeout=30)
    assert no_yaml.returncode != 0 and "No module named 'yaml'" in no_yaml.stderr

    env = {k: v for k, v in os.environ.items() if k != "CASESTREAM_PYTHON"}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
               CASESTREAM_LOCAL_DIR=str(tmp_path / "local"))
    proc = subprocess.run([str(TOOLS), "install"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr

    made = tmp_path / "local" / "k8s" / "schemas"
    assert sorted(p.name for p in made.glob("*.json")) == sorted(p.name for p in schemas.glob("*.json"))
    for name in ("scaledobject-keda-v1alpha1.json", "triggerauthentication-keda-v1alpha1.json"):
        mine = json.loads((made / name).read_text(encoding="utf-8"))
        assert mine == json.loads((schemas / name).read_text(encoding="utf-8")), name
        assert mine["properties"]["spec"]["additionalProperties"] is False  # strict, as kubeconform expects
