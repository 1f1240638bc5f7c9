"""Exceptions of the replay package.

Tree (all under :class:`casestream.errors.CasestreamError`)::

    ReplayError                 a replay could not run or finish
    ├── ReplayConfigError       bad projection / handler declarations / options (start-up)
    └── ReplayHandlerError      a projection handler raised; the batch rolled back, the
                                checkpoint is intact and a rerun resumes before that batch
"""

from __future__ import annotations

from casestream.errors import CasestreamError


class ReplayError(CasestreamError):
    """A replay could not run or finish."""


class ReplayConfigError(ReplayError):
    """A projection, its handlers or the replay options are invalid (raised before reading)."""


class ReplayHandlerError(ReplayError):
    """A projection handler raised while replaying; ``position`` = (topic, partition, offset)."""

    def __init__(self, message: str, *, position: tuple[str, int, int] | None = None) -> None:
        super().__init__(message)
        self.position = position
