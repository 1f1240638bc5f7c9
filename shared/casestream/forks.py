"""Clients belong to the process that made them: refuse one carried across ``os.fork()``.

A PostgreSQL pool, a librdkafka client or an HTTP client made before a fork shares its
sockets with the parent and lost its background threads in the child (only the forking
thread survives a fork), so using it there hangs or interleaves two processes' bytes on one
connection. A worker process (``CASESTREAM_WORKERS``, :mod:`casestream.service.workers`)
builds its clients after the fork; a client made earlier raises :class:`ForkedClientError`
at its next use instead. Pure (stdlib).
"""

from __future__ import annotations

import os

from casestream.errors import ConfigError

__all__ = ["ForkedClientError", "ProcessBound"]


class ForkedClientError(ConfigError):
    """A client made in one process was used in a process forked from it."""


class ProcessBound:
    """Remembers the process that made a client; :meth:`check` refuses any other.

    ``what`` names the client in the error (``"connection pool of case"``). A check costs one
    ``getpid`` system call (well under a microsecond).
    """

    __slots__ = ("pid", "what")

    def __init__(self, what: str) -> None:
        self.pid = os.getpid()
        self.what = what

    def check(self) -> None:
        """Raises:
            ForkedClientError: this process is not the one that made the client.
        """
        pid = os.getpid()
        if pid != self.pid:
            raise ForkedClientError(
                f"{self.what} was created in process {self.pid} and is used in process {pid}, "
                "forked from it: a client does not survive a fork (its sockets are shared with "
                "the parent, its threads are gone); create it after the fork, in the worker "
                "(casestream.service.run_service builds the service in each worker process)")
