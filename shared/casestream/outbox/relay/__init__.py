"""The outbox relay: publishes committed outbox rows to Kafka.

Public API::

    OutboxRelay(pool_or_dsn, producer_config: dict, settings: RelaySettings, name: str)
        .run(stop: threading.Event)   # until stop is set; flushes and releases leases
        .run_once() -> int            # one lease upkeep + one batch (tests)
        .metrics                      # RelayMetrics counters and gauges
    RelaySettings(..., retry=relay_retry(max_attempts=10))   # bounded attempts (default)

Design notes are in :mod:`casestream.outbox.relay.core`; the SQL in :mod:`casestream.outbox.relay.store`;
shard leases in :mod:`casestream.outbox.relay.leases`. ``python -m casestream.outbox.relay`` runs one
standalone relay process.
"""

from casestream.outbox.relay.core import FaultHook, OutboxRelay
from casestream.outbox.relay.metrics import RelayMetrics
from casestream.outbox.relay.settings import DEFAULT_MAX_ATTEMPTS, RelaySettings, relay_retry

__all__ = ["OutboxRelay", "RelaySettings", "RelayMetrics", "FaultHook", "DEFAULT_MAX_ATTEMPTS", "relay_retry"]
