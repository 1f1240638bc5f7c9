"""Where a test lives decides its marker, its pytest-xdist group and when it starts.

Folders (under ``tests/``) and their markers: ``unit``, ``integration``, ``e2e``, ``contract``
(:data:`FOLDER_MARKERS`). A test module does not set its folder's marker itself; per-module
extras (``wheel``, ``cluster``, ``secured``, ``debezium``, ``scaling``, ``timeout``) stay in the
module's ``pytestmark``.

Groups (``pytest -n N --dist loadfile``, scheduled by :func:`scheduler`): every module is
one group, so module fixtures (a private broker, a service stack, databases) start once and its
tests keep their order. The e2e modules (but those of :data:`OWN_GROUP`) and those of
:data:`SERIAL` share the group ``serial``:
they run on one worker one after another, because they use resources that are fixed for the
whole machine: the suite's default ports (18101-18105) and databases, the console's ports
(18100, 18400-18403), one ``suite_stack`` several modules share (``tests/e2e/conftest.py``).

Order: :func:`ordered` puts the ``serial`` group first, then modules marked as long
(:data:`LONG_MARKERS`), then the other integration modules, contract, and unit last; the
scheduler hands groups out in that order, so the longest chain starts at once and short unit
modules fill the end.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

TESTS = Path(__file__).resolve().parents[1]

#: folder under tests/ -> the marker every test in it carries
FOLDER_MARKERS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "contract": "contract"}

#: the group of the modules that must not run beside one another (module docstring)
SERIAL_GROUP = "serial"

#: modules (paths under tests/) in :data:`SERIAL_GROUP`; every e2e module is too
SERIAL: frozenset[str] = frozenset()

#: e2e modules that own every fixed resource they use (ports only they bind, databases, topics
#: and subjects only they name): each is a group of its own, beside the ``serial`` chain
OWN_GROUP: frozenset[str] = frozenset({
    "e2e/test_catalog_browser.py",        # console on a free port, no service
    "e2e/test_console_attacks_browser.py",  # 18401-18403, uuid-named topics and groups
    "e2e/test_team_path.py",              # 18562 and 18100, the ``orders`` database and topic
})

#: markers of modules that run for minutes: started right after the serial group
LONG_MARKERS = ("cluster", "wheel", "secured", "timeout")

_RANK = {"serial": 0, "long": 1, "integration": 2, "e2e": 2, "contract": 3, "unit": 4}


def folder_of(path: Path) -> str | None:
    """The folder under tests/ that holds ``path`` (``unit``, ``integration``...), or None."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid`` (``tests/unit/test_x.py::test_y``, relative to the
    rootdir): :data:`SERIAL_GROUP` or its module's path."""
    module = nodeid.split("::", 1)[0]
    under = module.removeprefix("tests/")
    if (under.startswith("e2e/") and under not in OWN_GROUP) or under in SERIAL:
        return SERIAL_GROUP
    return module


def mark_by_folder(items: Sequence[pytest.Item]) -> None:
    """Add each item's folder marker (:data:`FOLDER_MARKERS`)."""
    for item in items:
        folder = folder_of(item.path)
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])


def _rank(item: pytest.Item) -> int:
    if group_of(item.nodeid) == SERIAL_GROUP:
        return _RANK["serial"]
    if item.nodeid.split("::", 1)[0].removeprefix("tests/") in OWN_GROUP:
        return _RANK["long"]
    if any(item.get_closest_marker(m) for m in LONG_MARKERS):
        return _RANK["long"]
    return _RANK.get(folder_of(item.path) or "", len(_RANK))


def ordered(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` by rank (module docstring), otherwise in collection order (a stable sort)."""
    return sorted(items, key=_rank)


class SerialLock:
    """An exclusive ``flock`` on the file named by ``CASESTREAM_TEST_SERIAL_LOCK`` held from
    the first test of :data:`SERIAL_GROUP` to the teardown of its last, so a suite run shares
    the machine's fixed ports with other runs that take the same lock (e.g. ``flock
    /tmp/casestream-e2e.lock pytest tests/e2e/...``). Unset: no lock (CI, a lone machine)."""

    VARIABLE = "CASESTREAM_TEST_SERIAL_LOCK"

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
        # the outermost wrapper: waiting for the lock is not part of any test's timeout
        path = os.environ.get(self.VARIABLE)
        if path and self._file is None and group_of(item.nodeid) == SERIAL_GROUP:
            f = open(path, "ab")  # noqa: SIM115 - held across tests
            try:
                fcntl.flock(f, fcntl.LOCK_EX)
            except BaseException:
                f.close()
                raise
            self._file = f
        try:
            return (yield)
        finally:
            if self._file is not None and (nextitem is None or group_of(nextitem.nodeid) != SERIAL_GROUP):
                self._file.close()  # closing releases the lock
                self._file = None


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling with the groups and the start order of this module: one
    group per module, :data:`SERIAL_GROUP` for the e2e and :data:`SERIAL` modules, handed
    out in collection order (:func:`ordered`), not largest first."""
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False
    return Scheduling(config, log)
