"""Test helpers for code built on casestream (not used by services at run time).

Modules: ``consumer`` (consumer harness on the real Kafka / PostgreSQL, in-memory or
real codecs: ``memory_codec(catalog)`` is the one test codec; ``python -m casestream.testing.consumer`` is the crash-test child) and
``relay`` (isolated schemas, topics, a private Kafka broker). Import the modules; the
names below are re-exported lazily so that importing this package loads no driver.
``MemorySink`` is :class:`casestream.outbox.MemorySink` (the in-memory ``EventSink``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    **{name: "casestream.testing.consumer" for name in (
        "Harness", "close_codec", "create_topic", "headers_of", "make_event", "real_codec",
        "memory_codec")},
    "MemorySink": "casestream.outbox.sink",
    **{name: "casestream.testing.relay" for name in (
        "FakeEnvelope", "JsonCodec", "PrivateKafka", "create_topics", "delete_topics",
        "isolated_schema", "read_topics")},
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
