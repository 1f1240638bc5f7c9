"""The library holds no list of the suite: no service name, consumer, projection, service
module or port of the installed suite is written into ``shared/casestream`` (they are found
through entry points, :mod:`casestream.service.discovery`).

Checked on the AST: every string constant that is not a docstring must not equal a service
name, and no string (docstrings included) may contain a consumer name, projection name or
``services.<svc>`` module path; no integer constant may be a service's default port.
``casestream.testing`` is exempt: it builds the suite's events for the suite's tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from casestream.service import discovery

LIBRARY = Path(__file__).resolve().parents[2] / "shared" / "casestream"
EXEMPT = ("testing/",)


def _suite() -> tuple[set[str], set[str], set[int]]:
    specs = discovery.services()
    names = set(specs)
    qualified = {c for s in specs.values() for c in s.consumers}
    qualified |= set(discovery.projection_refs())
    qualified |= {s.module for s in specs.values()}
    qualified |= {ref.partition(":")[0] for ref in discovery.projection_refs().values()}
    qualified |= {ref.partition(":")[0] for ref in discovery.command_refs().values()}
    qualified |= {s.settings.partition(":")[0] for s in specs.values()}
    ports = {s.port({}) for s in specs.values()}
    return names, qualified, ports


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def suite_literals(root: Path, names: set[str], qualified: set[str], ports: set[int]) -> list[str]:
    """``path:line: what`` for every suite literal in the ``*.py`` files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(EXEMPT):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant):
                continue
            value = node.value
            where = f"{rel}:{node.lineno}"
            if isinstance(value, str):
                if id(node) not in docs and value in names:
                    found.append(f"{where}: service name {value!r}")
                found += [f"{where}: {q!r}" for q in sorted(qualified)
                          if q in value and _bounded(value, q)]
            elif isinstance(value, int) and not isinstance(value, bool) and value in ports:
                found.append(f"{where}: port {value}")
    return found


def _bounded(text: str, word: str) -> bool:
    """``word`` occurs in ``text`` not as part of a longer dotted name or identifier."""
    start = text.find(word)
    while start >= 0:
        before = text[start - 1] if start else " "
        end = start + len(word)
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "._-") and not (after.isalnum() or after in "_-"):
            return True
        start = text.find(word, start + 1)
    return False


def test_the_library_names_none_of_the_suite() -> None:
    names, qualified, ports = _suite()
    assert names and qualified and ports  # the suite is installed: the check is not empty
    found = suite_literals(LIBRARY, names, qualified, ports)
    assert not found, "suite literals in the library (use discovery):\n" + "\n".join(found)


def test_the_check_sees_a_list_creeping_back(tmp_path: Path) -> None:
    (tmp_path / "cli.py").write_text(
        '"""Lists services.case and audit.journal in its docstring."""\n'
        'SERVICES = ("case", "saga")\nPORT = 18101\nMOD = f"services.saga.adapters.x"\n'
        'OK = "in case of doubt"\n')
    found = suite_literals(tmp_path, {"case", "saga"}, {"services.case", "audit.journal",
                                                        "services.saga"}, {18101})
    assert sorted(found) == ["cli.py:1: 'audit.journal'", "cli.py:1: 'services.case'",
                     "cli.py:2: service name 'case'", "cli.py:2: service name 'saga'",
                     "cli.py:3: port 18101", "cli.py:4: 'services.saga'"]
