"""Failure classification: which exceptions are retried, which dead-letter at once, which stop the batch.

The runtime maps every exception at one boundary:

- ``POISON``     — ``PoisonMessageError`` (codec: bad magic byte, unknown schema id, resolution,
  validation; handlers may raise it too). Dead-lettered at once.
- ``RETRYABLE``  — ``RetryableError`` (``RegistryUnavailable`` and ``GuardConflict`` among them),
  psycopg ``SerializationFailure``, ``DeadlockDetected``, ``LockNotAvailable``, ``QueryCanceled``
  (statement timeout), other ``OperationalError`` on a live connection, ``TimeoutError``, and any
  *unclassified* exception (a bug may be fixed by a deploy: bounded attempts, then dead-letter).
  Retried with the consumer's ``RetryPolicy`` until it is exhausted, then dead-lettered.
- ``INFRA``      — the database connection itself is gone (``connection.closed`` / SQLSTATE class
  08 / admin shutdown 57P01..57P03). The whole batch is rolled back and retried with backoff
  *without* counting against any message (an outage must not dead-letter good messages).
"""

from __future__ import annotations

import enum
from typing import Any

import psycopg
from psycopg import errors as pgerr

from casestream.errors import PoisonMessageError


class FailureClass(enum.Enum):
    """How the runtime treats a failure."""

    POISON = "poison"
    RETRYABLE = "retryable"
    INFRA = "infra"


_RETRYABLE_PG = (
    pgerr.SerializationFailure,
    pgerr.DeadlockDetected,
    pgerr.LockNotAvailable,
    pgerr.QueryCanceled,
)


def connection_broken(conn: Any) -> bool:
    """True if the psycopg connection ``conn`` can no longer be used."""
    return conn is None or bool(getattr(conn, "closed", True)) or bool(getattr(conn, "broken", False))


def classify(exc: BaseException, conn: Any = None) -> FailureClass:
    """The failure class of ``exc`` raised while ``conn`` was in use (see module docstring)."""
    if isinstance(exc, PoisonMessageError):
        return FailureClass.POISON
    if isinstance(exc, psycopg.Error):
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if conn is not None and connection_broken(conn):
            return FailureClass.INFRA
        if sqlstate.startswith("08") or sqlstate in {"57P01", "57P02", "57P03"}:
            return FailureClass.INFRA
        if isinstance(exc, psycopg.InterfaceError):
            return FailureClass.INFRA
        return FailureClass.RETRYABLE
    return FailureClass.RETRYABLE  # RetryableError, TimeoutError and anything unclassified


def reason_of(exc: BaseException) -> str:
    """Short machine-readable reason for the DLQ header ``dlq.error.reason``."""
    if isinstance(exc, PoisonMessageError):
        return exc.reason
    if isinstance(exc, _RETRYABLE_PG):
        return "retries_exhausted:" + type(exc).__name__
    return "retries_exhausted"


def error_class(exc: BaseException) -> str:
    """Fully qualified class name of ``exc`` (``module.Qualname``) for ``dlq.error.class``."""
    t = type(exc)
    return f"{t.__module__}.{t.__qualname__}"
