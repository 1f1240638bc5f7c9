"""Each casestream package's ``__init__`` is its public API: ``__all__`` is declared, resolves,
and holds every name that another package or a service imports from the package."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import casestream

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = Path(casestream.__file__).resolve().parent
PACKAGES = ["casestream"] + sorted(
    m.name for m in pkgutil.walk_packages(casestream.__path__, "casestream.") if m.ispkg)


def _module_name(path: Path) -> str:
    base = LIBRARY.parent if path.is_relative_to(LIBRARY) else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports_from_packages() -> list[tuple[str, str, str, int]]:
    """(package, name, importing file, line) for each ``from <casestream package> import name``
    in services/ and shared/ whose importer is outside that package."""
    found = []
    packages = set(PACKAGES)
    files = [*sorted((ROOT / "services").rglob("*.py")), *sorted(LIBRARY.rglob("*.py"))]
    for path in files:
        importer = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in packages):
                continue
            pkg = node.module
            if pkg == "casestream" or importer == pkg or importer.startswith(pkg + "."):
                continue  # the root package only holds subpackages; own-package imports are internal
            found.extend((pkg, a.name, str(path.relative_to(ROOT)), node.lineno) for a in node.names)
    return found


def test_there_are_packages_and_imports_to_check() -> None:
    assert {"casestream.events", "casestream.outbox", "casestream.outbox.relay", "casestream.cli"} <= set(PACKAGES)
    assert ("casestream.events", "open_codec") in {(p, n) for p, n, _, _ in _imports_from_packages()}


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_declared_public_and_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    assert isinstance(names, list | tuple), f"{package} declares no __all__"
    assert len(set(names)) == len(names), f"{package}.__all__ has duplicates"
    for name in names:
        if package == "casestream" and name == "__version__":
            continue
        assert not name.startswith("_"), f"{package}.__all__ exports private name {name!r}"
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names that do not resolve: {missing}"


def test_every_name_imported_from_a_package_is_in_its_all() -> None:
    missing = [f"{where}:{line}: {name} (from {pkg})"
               for pkg, name, where, line in _imports_from_packages()
               if name not in importlib.import_module(pkg).__all__]
    assert not missing, "imported from a package but not in its __all__:\n" + "\n".join(missing)
