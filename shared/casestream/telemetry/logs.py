"""JSON log lines with trace and message context; personal data kept out.

Driver module (stdlib logging + opentelemetry-api for the current span). One JSON object per
line on stderr with these fields:

``timestamp`` (RFC 3339 UTC, ms), ``level``, ``service``, ``logger``, ``message``,
``trace_id``/``span_id`` (current span, if any), ``correlation_id``, ``event_id``,
``aggregate_id``, ``consumer``, ``attempt``, ``failure_class`` (from :func:`log_context`
or ``extra={...}``), ``idempotency_key_hash`` (an ``idempotency_key`` passed in ``extra`` is
replaced by its SHA-256), ``exc_type``/``exc`` for exceptions.

Personal data: e-mail addresses in messages, exception texts and every context field
(string values of :func:`log_context` and ``extra``) are replaced with ``<email>`` (the case content's names/addresses are never passed to loggers by the services;
this is a last line of defence for the one field that leaks most — reporter e-mails).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace

__all__ = ["JsonFormatter", "log_context", "pop_log_context", "push_log_context", "redact",
           "CONTEXT_FIELDS"]

CONTEXT_FIELDS = ("correlation_id", "event_id", "aggregate_id", "consumer", "attempt",
                  "failure_class")

_CONTEXT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "casestream_log_context", default={})  # noqa: B039 - never mutated, replaced

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")


def redact(text: str) -> str:
    """``text`` with e-mail addresses replaced by ``<email>``."""
    return _EMAIL.sub("<email>", text)


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (names from CONTEXT_FIELDS; None values dropped) to every log line
    emitted in this context (thread / task), restoring the previous context on exit."""
    token = push_log_context(fields)
    try:
        yield
    finally:
        pop_log_context(token)


def push_log_context(fields: dict[str, Any]) -> contextvars.Token[dict[str, Any]]:
    """:func:`log_context` without the context manager (for hooks run once per message):
    add ``fields`` (None values dropped); returns the token to give :func:`pop_log_context`."""
    return _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}})


def pop_log_context(token: contextvars.Token[dict[str, Any]]) -> None:
    """Restore the log context from before the :func:`push_log_context` that returned ``token``."""
    _CONTEXT.reset(token)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (see the module docstring)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, tz=timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        sc = trace.get_current_span().get_span_context()
        if sc.is_valid:
            out["trace_id"] = f"{sc.trace_id:032x}"
            out["span_id"] = f"{sc.span_id:016x}"
        for name, value in _CONTEXT.get().items():
            out[name] = _redacted(value)
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                out[name] = _redacted(value)
        key = record.__dict__.get("idempotency_key")
        if key is not None:
            out["idempotency_key_hash"] = hashlib.sha256(str(key).encode()).hexdigest()[:32]
        if record.exc_info and record.exc_info[0] is not None:
            out["exc_type"] = record.exc_info[0].__name__
            out["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, default=str, ensure_ascii=False)
