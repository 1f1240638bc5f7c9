"""Exceptions of the replay package (drawn in the tree of :mod:`casestream.errors`)."""

from __future__ import annotations

from casestream.errors import CasestreamError


class ReplayError(CasestreamError):
    """A replay could not run or finish."""


class ReplayConfigError(ReplayError):
    """A projection, its handlers or the replay options are invalid (raised before reading)."""


class PartialReplayRefused(ReplayConfigError):
    """A replay to ``now`` over part of the history (a later ``--from``, or history removed
    by retention) with neither ``merge`` nor ``only_range``: swapping it in would silently
    drop every row of the events before the range. Raised before anything is written."""


class ReplayHandlerError(ReplayError):
    """A projection handler raised while replaying; ``position`` = (topic, partition, offset).

    The batch rolled back and the checkpoint is intact: a rerun resumes before that batch."""

    def __init__(self, message: str, *, position: tuple[str, int, int] | None = None) -> None:
        super().__init__(message)
        self.position = position
