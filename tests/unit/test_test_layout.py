"""The test tree's layout rules (tests/support/layout.py): a test's folder gives its marker, so no
module sets that marker by hand, and no test module lives outside a marked folder."""

from __future__ import annotations

import ast
import fcntl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import layout

MODULES = sorted(layout.TESTS.glob("**/test_*.py"))


def _hand_set_markers(path: Path) -> list[str]:
    """``pytest.mark.<name>`` uses in ``path`` whose name is a folder marker."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr in layout.FOLDER_MARKERS.values()
                and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"):
            found.append(f"{path.relative_to(layout.TESTS)}:{node.lineno} pytest.mark.{node.attr}")
    return found


def test_no_test_module_sets_its_folder_marker_by_hand() -> None:
    assert MODULES
    folder_marks = [hit for path in MODULES if layout.folder_of(path) in layout.FOLDER_MARKERS
                    for hit in _hand_set_markers(path)
                    if hit.endswith(f"pytest.mark.{layout.FOLDER_MARKERS[layout.folder_of(path)]}")]
    assert folder_marks == []


def test_every_test_module_is_in_a_marked_folder() -> None:
    assert [str(p.relative_to(layout.TESTS)) for p in MODULES
            if layout.folder_of(p) not in layout.FOLDER_MARKERS] == []


class _Item:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.nodeid = f"tests/{path.relative_to(layout.TESTS).as_posix()}::test_a"
        self.markers: list[Any] = []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker if isinstance(marker, str) else marker.mark)

    def get_closest_marker(self, name: str) -> Any:
        return next((m for m in self.markers if getattr(m, "name", m) == name), None)


@pytest.mark.parametrize(("module", "marker", "group"), [
    ("unit/test_handlers.py", "unit", "tests/unit/test_handlers.py"),
    ("integration/test_relay.py", "integration", "tests/integration/test_relay.py"),
    ("contract/test_schemas.py", "contract", "tests/contract/test_schemas.py"),
    ("e2e/test_soak.py", "e2e", layout.SERIAL_GROUP),
    ("e2e/test_console_browser.py", "e2e", layout.SERIAL_GROUP),
])
def test_the_folder_gives_the_marker_and_the_module_or_serial_group(module: str, marker: str,
                                                                     group: str) -> None:
    item = _Item(layout.TESTS / module)
    layout.mark_by_folder([item])  # type: ignore[list-item]
    assert item.markers == [marker]
    assert layout.group_of(f"tests/{module}::test_a[x::y]") == group


def test_the_serial_group_starts_first_then_long_modules_and_unit_modules_last() -> None:
    paths = ["unit/test_handlers.py", "integration/test_relay.py", "contract/test_schemas.py",
             "integration/test_kafka_cluster.py", "e2e/test_soak.py", "unit/test_codec.py"]
    items = [_Item(layout.TESTS / p) for p in paths]
    layout.mark_by_folder(items)  # type: ignore[arg-type]
    items[3].markers.append(SimpleNamespace(name="cluster", args=()))
    order = [str(i.path.relative_to(layout.TESTS)) for i in layout.ordered(items)]  # type: ignore[arg-type]
    assert order == ["e2e/test_soak.py", "integration/test_kafka_cluster.py", "integration/test_relay.py",
                     "contract/test_schemas.py", "unit/test_handlers.py", "unit/test_codec.py"]


def test_the_serial_lock_is_held_from_the_first_serial_test_through_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "e2e.lock"
    monkeypatch.setenv(layout.SerialLock.VARIABLE, str(path))
    lock = layout.SerialLock()
    first, last, unit = (SimpleNamespace(nodeid=n) for n in (
        "tests/e2e/test_a.py::test_x", "tests/e2e/test_b.py::test_y", "tests/unit/test_c.py::test_z"))

    def held_elsewhere() -> bool:
        with open(path, "ab") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    seen = []
    for item, nextitem in ((first, last), (last, unit), (unit, None)):
        protocol = lock.pytest_runtest_protocol(item, nextitem)
        next(protocol)  # the test runs here
        seen.append(held_elsewhere())
        with pytest.raises(StopIteration):
            protocol.send(None)
        seen.append(held_elsewhere())
    assert seen == [True, True, True, False, False, False]
