"""Relay settings: one frozen object, built by a service's bootstrap and passed in.

Every duration is in seconds (suffix ``_s``); counts are rows. Defaults suit a service
replica on this 2-core machine: 1,000-row batches, 10 s shard leases, NOTIFY wake-up with
a 0.5 s polling fallback, published rows kept for 1 hour, at most
:data:`DEFAULT_MAX_ATTEMPTS` attempts per row after a retryable error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from casestream.errors import ConfigError
from casestream.outbox.writer import DEFAULT_TOPIC_PREFIX
from casestream.retry import RetryPolicy

__all__ = ["RelaySettings", "DEFAULT_MAX_ATTEMPTS", "relay_retry"]

#: Attempts per outbox row after retryable errors (first try included) before it is marked
#: ``failed`` (metric ``relay_gave_up_total``). With the default backoff (0.5 s doubling to
#: 60 s) the tenth attempt starts about 4 minutes after the first; each attempt may itself
#: last up to ``message.timeout.ms`` (300 s) while the broker is away, so a row survives a
#: broker outage of about 50 minutes before an operator has to re-drive it
#: (``casestream outbox redrive``).
DEFAULT_MAX_ATTEMPTS = 10


def relay_retry(max_attempts: int | None = DEFAULT_MAX_ATTEMPTS) -> RetryPolicy:
    """The relay's default backoff (0.5 s doubling to 60 s, jitter 0.5) with ``max_attempts``
    (``None``: unbounded — a row is then retried until it is delivered).

    Raises:
        ConfigError: ``max_attempts`` < 1.
    """
    if max_attempts is not None and max_attempts < 1:
        raise ConfigError(f"relay max_attempts must be >= 1, got {max_attempts}")
    return RetryPolicy(initial_delay_s=0.5, max_delay_s=60.0, multiplier=2.0, jitter=0.5,
                       max_attempts=max_attempts)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelaySettings:
    """Tuning of :class:`casestream.outbox.relay.OutboxRelay`.

    Attributes:
        batch_size: rows claimed, produced and marked per batch (one UPDATE/DELETE).
        poll_interval_s: longest idle wait when no NOTIFY arrives (polling fallback;
            also bounds how late a row whose backoff ended is picked up).
        lease_s: shard lease duration; a dead relay's shards are taken over after at
            most ``lease_s + renew_interval_s``.
        renew_interval_s: lease renewal / membership heartbeat period (default lease_s/3).
        topic_prefix: topic = prefix + aggregatetype (Debezium ``route.topic.replacement``).
        retry: backoff of rows after a transient delivery error (``next_attempt_at``);
            ``retry.max_attempts`` (default :data:`DEFAULT_MAX_ATTEMPTS`) bounds attempts,
            after which a row is marked failed and counted in ``gave_up_total``.
        published_retention_s: published rows are kept this long (status ``published``,
            with partition/offset) and then deleted; ``0`` deletes a row as soon as its
            delivery is confirmed.
        cleanup_interval_s: how often the retention delete runs.
        cleanup_batch: rows deleted per retention statement.
        metrics_interval_s: how often pending/failed counts and oldest pending age are
            refreshed from the database.
        shutdown_timeout_s: on stop, how long to wait for outstanding delivery reports and
            the bookkeeping of the batches in hand (seconds). Past it the unsent messages are
            purged, what was reported is recorded, and the rows sent without a report are left
            pending and counted in the log: the next owner may publish those twice.
        delivery_poll_s: ``Producer.poll`` timeout while waiting for delivery reports.
        pipeline: mark a fully delivered batch on a second connection while the next
            batch is claimed and produced (bookkeeping overlaps Kafka round trips).
        max_open_batches: batches produced and not yet settled at once in ``run``; with
            2 (default) a NOTIFY that arrives while a partial batch awaits its delivery
            reports is served at once (the later claim skips the open batches'
            aggregates); 1 waits for every batch's reports before the next claim.
        open_wait_s: while a batch is open, the LISTEN wait between two ``Producer.poll``
            calls that serve its delivery reports.
        topic_limit_ttl_s: how long a topic's ``max.message.bytes`` read from the broker is
            trusted before it is read again (a size rejection re-reads it at once).
        report_timeout_s: a batch still without all its delivery reports this long after
            its claim, seconds, ends the wait: the producer is recreated and the batch's
            rows, still pending, produced again by it (see the relay's "Stalled producer").
            ``None``: wait as long as librdkafka does (``message.timeout.ms``).
        claim_floor: start each claim at ``outbox_claim_floor`` (no pending row below it)
            and raise the floor about every ``claim_floor_interval_s`` seconds, so a snapshot
            held open elsewhere does not make every claim walk the rows published since
            (``casestream.outbox.relay.floor``); ``False`` claims from the start of the index.
        claim_floor_interval_s: period of the floor's steps (two steps per raise).
    """

    batch_size: int = 1000
    poll_interval_s: float = 0.5
    lease_s: float = 10.0
    renew_interval_s: float | None = None
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    retry: RetryPolicy = field(default_factory=relay_retry)
    published_retention_s: float = 3600.0
    cleanup_interval_s: float = 30.0
    cleanup_batch: int = 10_000
    metrics_interval_s: float = 5.0
    shutdown_timeout_s: float = 10.0
    delivery_poll_s: float = 0.05
    pipeline: bool = True
    max_open_batches: int = 2
    open_wait_s: float = 0.002
    topic_limit_ttl_s: float = 300.0
    report_timeout_s: float | None = 30.0
    claim_floor: bool = True
    claim_floor_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"relay batch_size must be >= 1, got {self.batch_size}")
        if self.lease_s <= 0 or self.poll_interval_s <= 0:
            raise ConfigError("relay lease_s and poll_interval_s must be > 0")
        if self.renew_interval_s is not None and not 0 < self.renew_interval_s < self.lease_s:
            raise ConfigError("relay renew_interval_s must be in (0, lease_s)")
        if self.max_open_batches < 1:
            raise ConfigError(f"relay max_open_batches must be >= 1, got {self.max_open_batches}")
        if self.open_wait_s <= 0:
            raise ConfigError("relay open_wait_s must be > 0")
        if self.topic_limit_ttl_s <= 0:
            raise ConfigError("relay topic_limit_ttl_s must be > 0")
        if self.report_timeout_s is not None and self.report_timeout_s <= 0:
            raise ConfigError("relay report_timeout_s must be > 0 or None")
        if self.claim_floor_interval_s <= 0:
            raise ConfigError("relay claim_floor_interval_s must be > 0")
        if self.published_retention_s < 0:
            raise ConfigError("relay published_retention_s must be >= 0")

    @property
    def renew_every_s(self) -> float:
        """Effective renewal period in seconds."""
        return self.renew_interval_s if self.renew_interval_s is not None else self.lease_s / 3.0
