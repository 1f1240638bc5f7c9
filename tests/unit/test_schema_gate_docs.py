"""Every configuration example of docs/schema-gate.md runs as documented.

Each fenced ``toml`` or ``yaml`` block of the page follows a comment
``<!-- example: NAME; file: F; files: A, B; exit N; subjects: S, T -->``. A ``toml`` block is
written verbatim as the configuration file (``casestream-schemas.toml``, or ``file:``) of a
temporary repository holding the listed schema files (``files: acme``: the foreign-layout
fixture), ``casestream schemas check`` runs there as CI runs it (the console script), and its
exit status and subjects must be the documented ones. A ``yaml`` block must name only hooks of
.pre-commit-hooks.yaml or inputs of action.yml. A block without its comment fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "schema-gate.md"
ACME = REPO / "tests" / "fixtures" / "acme-schemas"
BLOCK = re.compile(r"(?:<!--\s*example:(?P<meta>[^>]*?)-->\s*\n)?```(?P<lang>toml|yaml)\n(?P<body>.*?)```", re.S)


def record(name: str, *extra: dict) -> str:
    fields = [{"name": "order_id", "type": "string"}, *extra]
    return json.dumps({"type": "record", "name": name, "namespace": "com.acme.orders", "fields": fields})


CHANNEL = {"name": "channel", "type": "string", "default": "web"}
CHAIN = """from casestream.events.upcasting import UpcasterChain


def upcasters() -> UpcasterChain:
    chain = UpcasterChain()
    chain.add("OrderPlaced", 1, lambda p: {**p, "channel": "web"})
    return chain
"""


def content(path: str) -> str:
    """A file the examples name: the second version of a subject adds a field with a default."""
    if path.endswith(".py"):
        return CHAIN if path.endswith("upcasting.py") else ""
    if "-key/" in path:
        return '"string"' if path.endswith("v1.avsc") else '{"type": "string"}'
    name = "Payment" if path.startswith("payments/") else "OrderPlaced"
    second = re.search(r"(v2|second)\.avsc$", path)
    return record(name, CHANNEL) if second else record(name)


def examples() -> list[tuple[str, str, dict[str, str]]]:
    """(lang, body, meta) of every block; meta keys: name, file, files, exit, subjects."""
    out = []
    for m in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        meta: dict[str, str] = {}
        if m.group("meta"):
            first, *rest = [part.strip() for part in m.group("meta").split(";")]
            meta["name"] = first
            for part in rest:
                key, _, value = part.partition(":") if ":" in part else part.partition(" ")
                meta[key.strip()] = value.strip()
        out.append((m.group("lang"), m.group("body"), meta))
    return out


def test_every_block_is_marked_and_the_page_has_examples() -> None:
    found = examples()
    unmarked = [body.splitlines()[0] for _, body, meta in found if "name" not in meta]
    assert not unmarked, f"blocks without an <!-- example: ... --> comment: {unmarked}"
    names = [meta["name"] for _, _, meta in found]
    assert len(names) == len(set(names)), names
    assert {"full", "flat", "per-record", "topic", "key", "explicit", "pyproject", "upcasters"} <= set(names)


@pytest.mark.parametrize("example", [e for e in examples() if e[0] == "toml"], ids=lambda e: e[2].get("name", "?"))
def test_configuration_example_runs_as_documented(example: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    _, body, meta = example
    root = tmp_path / "repo"
    if meta["files"] == "acme":
        shutil.copytree(ACME, root)
    else:
        root.mkdir()
        for rel in (f.strip() for f in meta["files"].split(",")):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content(rel))
    (root / meta.get("file", "casestream-schemas.toml")).write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(Path(sys.executable).parent / "casestream"), "schemas", "check", "--format", "json"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == int(meta["exit"]), done.stdout + done.stderr
    subjects = sorted(s.strip() for s in meta["subjects"].split(","))
    assert sorted(json.loads(done.stdout)["subject_names"]) == subjects, done.stdout


def test_yaml_examples_name_real_hooks_and_action_inputs() -> None:
    hooks = {h["id"] for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    inputs = set(yaml.safe_load((REPO / "action.yml").read_text())["inputs"])
    checked = 0
    for lang, body, meta in examples():
        if lang != "yaml":
            continue
        for item in yaml.safe_load(body):
            if "hooks" in item:
                used = {h["id"] for h in item["hooks"]} | set(re.findall(r"#\s*- id: ([\w-]+)", body))
                assert used <= hooks, (meta["name"], used - hooks)
                checked += 1
            elif "<owner>/casestream@" in item.get("uses", ""):
                assert set(item.get("with", {})) <= inputs, (meta["name"], set(item["with"]) - inputs)
                checked += 1
    assert checked >= 4


def test_a_pattern_without_name_is_refused_outside_topic_name_strategy(tmp_path: Path) -> None:
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "v1.avsc").write_text(record("OrderPlaced"))
    (tmp_path / "casestream-schemas.toml").write_text('[[folders]]\npath = "orders"\npattern = "v{version}.avsc"\n')
    done = subprocess.run([str(Path(sys.executable).parent / "casestream"), "schemas", "check"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "[[folders]] #1: pattern 'v{version}.avsc' needs {name}" in done.stderr
    assert 'unless naming_strategy = "TopicNameStrategy"' in done.stderr
