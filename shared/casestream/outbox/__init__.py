"""Transactional outbox: the writer (one transaction with the state change) and the relay.

Public API::

    from casestream.outbox import OutboxWriter, OUTBOX_MIGRATIONS, headers_for, bump_version
    from casestream.outbox import OutboxRelay, RelaySettings   # the relay (Kafka producer)
    from casestream.outbox import OutboxSink, MemorySink       # EventSink adapters
    from casestream.outbox import outbox_status, redrive       # operator actions (admin)

Modules: ``writer`` (table DDL, :class:`OutboxWriter`, version checks), ``sink`` (the
``EventSink`` adapters: outbox rows in the caller's transaction, an in-memory list), the
``relay`` package (publishes committed rows; ``python -m casestream.outbox.relay``) and
``admin`` (status counts, listing, show, re-drive, discard: ``casestream outbox``).
The relay and admin names are re-exported lazily: the writer needs no Kafka client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

from casestream.outbox.writer import (
    DEFAULT_TOPIC_PREFIX,
    NOTIFY_CHANNEL,
    OUTBOX_DDL,
    OUTBOX_MIGRATION,
    OUTBOX_MIGRATIONS,
    OUTBOX_STORAGE_MIGRATION,
    OUTBOX_SHARDS,
    EventEncoder,
    OutboxRowTooLarge,
    OutboxWriter,
    bump_version,
    headers_for,
    topic_for,
)

from casestream.outbox.sink import MemorySink, OutboxSink

if TYPE_CHECKING:
    from casestream.outbox.admin import (
        ROW_STATUSES,
        NoOutboxTable,
        OutboxDatabaseError,
        OutboxRow,
        OutboxStatus,
        RelayMember,
        discard,
        list_rows,
        outbox_status,
        redrive,
        show_row,
    )
    from casestream.outbox.relay import FaultHook, OutboxRelay, RelayMetrics, RelaySettings

# Lazy: the relay imports confluent_kafka; a service writing rows does not need it.
_LAZY = {name: "casestream.outbox.relay" for name in ("FaultHook", "OutboxRelay", "RelayMetrics", "RelaySettings")}
_ADMIN = ("ROW_STATUSES", "NoOutboxTable", "OutboxDatabaseError", "OutboxRow", "OutboxStatus",
          "RelayMember", "discard", "list_rows", "outbox_status", "redrive", "show_row")
_LAZY.update({name: "casestream.outbox.admin" for name in _ADMIN})

__all__ = [
    "DEFAULT_TOPIC_PREFIX", "NOTIFY_CHANNEL", "OUTBOX_DDL", "OUTBOX_MIGRATION", "OUTBOX_MIGRATIONS",
    "OUTBOX_STORAGE_MIGRATION", "OUTBOX_SHARDS",
    "EventEncoder", "FaultHook", "MemorySink", "OutboxRelay", "OutboxRowTooLarge", "OutboxSink",
    "OutboxWriter",
    "RelayMetrics", "RelaySettings",
    "bump_version", "headers_for", "topic_for", *_ADMIN,
]


__getattr__ = lazy_exports(__name__, _LAZY, globals())
