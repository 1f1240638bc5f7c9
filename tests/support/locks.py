"""A lock across processes (pytest-xdist workers) around a cache folder filled on first use."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its folder, when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock
