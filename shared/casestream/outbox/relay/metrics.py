"""Relay metrics: plain counters and gauges, read by any thread, updated by the relay's.

The fields are the exported metrics (``outbox_pending_total``,
``outbox_oldest_pending_age_seconds``, ...); the observability layer exports :meth:`RelayMetrics.snapshot` (or wires
``OutboxRelay(on_metrics=...)``) to OpenTelemetry without touching the relay.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["RelayMetrics"]


@dataclass(slots=True)
class RelayMetrics:
    """Counters (monotonic, since start) and gauges (last observed) of one relay instance.

    Counters: ``published_total`` rows confirmed by a delivery report; ``delivery_errors_total``
    failed delivery reports or synchronous produce errors; ``retried_total`` rows rescheduled
    with backoff; ``failed_total`` rows marked failed (non-retryable or attempts exhausted);
    ``gave_up_total`` rows failed because a retryable error used up ``max_attempts`` (an
    alert: an operator re-drives them); ``size_rejections_total`` batches the broker refused
    as larger than the topic's ``max.message.bytes`` (their rows are retried in smaller
    batches); ``batches_total``; ``order_breaches_total`` batches in which a later row of an aggregate
    was delivered after an earlier one failed (a message timeout, or a size rejection
    after a topic's limit was lowered; see the relay design notes); ``producer_restarts_total`` after fatal
    errors or report timeouts; ``report_timeouts_total`` producers recreated because a batch's
    delivery reports did not come within ``report_timeout_s``; ``db_errors_total``; ``cleaned_total`` rows removed by retention; ``fenced_total`` rows whose
    outcome was refused because their shard's lease moved to another instance (epoch) between
    claim and bookkeeping; ``stale_claims_dropped_total`` claimed batches not sent because the
    leases expired before they were produced (the process was paused or cut off).

    Gauges (refreshed every ``metrics_interval_s``): ``outbox_pending_total`` pending rows
    in the whole table, ``outbox_failed_total`` failed rows,
    ``outbox_oldest_pending_age_seconds`` age of the oldest pending row (0 if none),
    ``shards_held`` leases this instance holds, ``last_batch_size``, ``last_batch_seconds``;
    ``postgres_xmin_horizon_age_seconds`` age of the oldest transaction holding the outbox
    database's vacuum horizon back (``store.xmin_horizon_age_s``), ``outbox_claim_floor``
    the ``seq`` the claims start at.
    """

    published_total: int = 0
    delivery_errors_total: int = 0
    retried_total: int = 0
    failed_total: int = 0
    gave_up_total: int = 0
    size_rejections_total: int = 0
    batches_total: int = 0
    order_breaches_total: int = 0
    producer_restarts_total: int = 0
    report_timeouts_total: int = 0
    db_errors_total: int = 0
    cleaned_total: int = 0
    fenced_total: int = 0
    stale_claims_dropped_total: int = 0
    outbox_pending_total: int = 0
    outbox_failed_total: int = 0
    outbox_oldest_pending_age_seconds: float = 0.0
    shards_held: int = 0
    last_batch_size: int = 0
    last_batch_seconds: float = 0.0
    postgres_xmin_horizon_age_seconds: float = 0.0
    outbox_claim_floor: int = 0

    def snapshot(self) -> dict[str, float]:
        """Return every counter and gauge by name (a copy)."""
        return {k: float(v) for k, v in asdict(self).items()}
