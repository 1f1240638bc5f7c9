"""Transactional outbox: the writer (one transaction with the state change) and the relay.

Public API::

    from casestream.outbox import OutboxWriter, OUTBOX_MIGRATIONS, headers_for, bump_version
    from casestream.outbox import OutboxRelay, RelaySettings   # the relay (Kafka producer)
    from casestream.outbox import OutboxSink, MemorySink       # EventSink adapters
    from casestream.outbox import outbox_status, redrive       # operator actions (admin)
    from casestream.outbox import CdcRetention, cdc_status     # Debezium publishes (cdc)
    from casestream.outbox import ConnectClient, outbox_connector_config   # Kafka Connect (connect)
    from casestream.outbox import handover                     # relay <-> Debezium (handover)

Modules: ``writer`` (table DDL, :class:`OutboxWriter`, version checks), ``sink`` (the
``EventSink`` adapters: outbox rows in the caller's transaction, an in-memory list), the
``relay`` package (publishes committed rows; ``python -m casestream.outbox.relay``) and
``admin`` (status counts, listing, show, re-drive, discard: ``casestream outbox``),
``cdc`` (who publishes, CDC checkpoints, status and retention), ``connect`` (the Debezium
connector configuration, a Kafka Connect REST client) and ``switch`` (``casestream outbox
handover``).
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
    OUTBOX_PUBLISHER_MIGRATION,
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
    from casestream.outbox.cdc import CdcError, CdcRetention, CdcStatus, cdc_status, default_slot_name
    from casestream.outbox.connect import ConnectClient, ConnectError, connector_name, outbox_connector_config
    from casestream.outbox.switch import HandoverResult, handover

# Lazy: the relay imports confluent_kafka; a service writing rows does not need it.
_LAZY = {name: "casestream.outbox.relay" for name in ("FaultHook", "OutboxRelay", "RelayMetrics", "RelaySettings")}
_ADMIN = ("ROW_STATUSES", "NoOutboxTable", "OutboxDatabaseError", "OutboxRow", "OutboxStatus",
          "RelayMember", "discard", "list_rows", "outbox_status", "redrive", "show_row")
_LAZY.update({name: "casestream.outbox.admin" for name in _ADMIN})
_CDC = ("CdcError", "CdcRetention", "CdcStatus", "cdc_status", "default_slot_name")
_CONNECT = ("ConnectClient", "ConnectError", "connector_name", "outbox_connector_config")
_HANDOVER = ("HandoverResult", "handover")
_LAZY.update({name: "casestream.outbox.cdc" for name in _CDC})
_LAZY.update({name: "casestream.outbox.connect" for name in _CONNECT})
_LAZY.update({name: "casestream.outbox.switch" for name in _HANDOVER})

__all__ = [
    "DEFAULT_TOPIC_PREFIX", "NOTIFY_CHANNEL", "OUTBOX_DDL", "OUTBOX_MIGRATION", "OUTBOX_MIGRATIONS",
    "OUTBOX_STORAGE_MIGRATION", "OUTBOX_PUBLISHER_MIGRATION", "OUTBOX_SHARDS",
    "EventEncoder", "FaultHook", "MemorySink", "OutboxRelay", "OutboxRowTooLarge", "OutboxSink",
    "OutboxWriter",
    "RelayMetrics", "RelaySettings",
    "bump_version", "headers_for", "topic_for", *_ADMIN, *_CDC, *_CONNECT, *_HANDOVER,
]


__getattr__ = lazy_exports(__name__, _LAZY, globals())
