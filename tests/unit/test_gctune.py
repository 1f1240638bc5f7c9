"""freeze_startup_objects: what is alive is frozen (never walked again); disabled = untouched."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from casestream.service.gctune import freeze_startup_objects


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_alive_now_are_frozen() -> None:
    alive = [[i] for i in range(1000)]  # tracked containers
    frozen = freeze_startup_objects()
    assert frozen == gc.get_freeze_count() >= len(alive)
    walked = {id(o) for g in (0, 1, 2) for o in gc.get_objects(generation=g)}
    assert not walked & {id(x) for x in alive}


def test_disabled_changes_nothing() -> None:
    assert freeze_startup_objects(False) == 0
    assert gc.get_freeze_count() == 0
