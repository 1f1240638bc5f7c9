"""Transactional outbox: the writer (one transaction with the state change) and the relay.

Public API::

    from casestream.outbox import OutboxWriter, OUTBOX_MIGRATION, headers_for, bump_version
    from casestream.outbox import OutboxRelay, RelaySettings   # the relay (Kafka producer)
    from casestream.outbox import OutboxSink, MemorySink       # EventSink adapters

Modules: ``writer`` (table DDL, :class:`OutboxWriter`, version checks), ``sink`` (the
``EventSink`` adapters: outbox rows in the caller's transaction, an in-memory list) and the
``relay`` package (publishes committed rows; ``python -m casestream.outbox.relay``).
The relay names are re-exported lazily: the writer needs no Kafka client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from casestream.outbox.writer import (
    DEFAULT_TOPIC_PREFIX,
    NOTIFY_CHANNEL,
    OUTBOX_DDL,
    OUTBOX_MIGRATION,
    OUTBOX_SHARDS,
    EventEncoder,
    OutboxWriter,
    bump_version,
    headers_for,
    topic_for,
)

from casestream.outbox.sink import MemorySink, OutboxSink

if TYPE_CHECKING:
    from casestream.outbox.relay import FaultHook, OutboxRelay, RelayMetrics, RelaySettings

# Lazy: the relay imports confluent_kafka; a service writing rows does not need it.
_LAZY = {name: "casestream.outbox.relay" for name in ("FaultHook", "OutboxRelay", "RelayMetrics", "RelaySettings")}

__all__ = [
    "DEFAULT_TOPIC_PREFIX", "NOTIFY_CHANNEL", "OUTBOX_DDL", "OUTBOX_MIGRATION", "OUTBOX_SHARDS",
    "EventEncoder", "FaultHook", "MemorySink", "OutboxRelay", "OutboxSink", "OutboxWriter",
    "RelayMetrics", "RelaySettings",
    "bump_version", "headers_for", "topic_for",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
