"""Tuning and policy of one consumer runtime (pure, frozen).

A service builds one ``ConsumerSettings`` per consumer from its own pydantic Settings in
``bootstrap.py``; nothing here reads the environment. All durations are in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from casestream.errors import ConfigError
from casestream.retry import RetryPolicy
from casestream.handlers.guard import FirstSeenPolicy
from casestream.handlers.processing import ProcessingMode


def _default_retry() -> RetryPolicy:
    """The consumer's default: 5 attempts, 0.2 s doubling to at most 30 s, jitter 0.5."""
    return RetryPolicy(initial_delay_s=0.2, max_delay_s=30.0, multiplier=2.0, jitter=0.5,
                       max_attempts=5)


GROUP_PROTOCOLS = ("classic", "consumer")
"""Values of ``ConsumerSettings.group_protocol`` (librdkafka ``group.protocol``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSettings:
    """Policy and tuning of a consumer runtime.

    Attributes:
        batch_size: ``num_messages`` per ``Consumer.consume`` call = messages per DB transaction.
        poll_timeout_s: ``timeout`` of ``Consumer.consume``.
        max_batch_s: stop applying a batch after this long, commit what is done and rewind the
            rest (keeps batches bounded in time; rule source: ``max.poll.interval.ms``).
        heartbeat_after_s: if a batch runs longer than this, the runtime pauses all partitions and
            keeps calling ``poll`` while it finishes, so a long handler does not get the consumer
            evicted (``max.poll.interval.ms``) with work half done.
        retry: backoff of retryable failures (per message: after ``max_attempts`` failed
            attempts or ``max_elapsed_s`` since its first failure it is dead-lettered; counted
            durably in ``consumer_retry``, so across members and restarts) and of failed
            batches; must be bounded (see ``casestream.retry``).
        gap_hold_s: how long an aggregate with a version gap is held before it is parked and its
            first held event dead-lettered with reason ``version_gap``.
        sweep_interval_s: how often held/parked aggregates are checked (deadline, drain).
        first_seen: first-seen version policy of the guard (see ``casestream.handlers.guard``).
        strict_types: dead-letter events whose type has no handler and was not ``ignore``d
            (reason ``unknown_event_type``); default: skip and count.
        mode: LIVE or REPLAY.
        fast_path: try each batch as set-based SQL without savepoints first, falling back to
            a savepoint per message when anything fails.
        pipeline_handlers: on the fast path, run handlers in psycopg pipeline mode (statements
            are sent without waiting for each result). Handlers then must read results with
            ``RETURNING`` + ``fetchone()`` rather than ``cursor.rowcount`` (-1 until the sync),
            and a database error they catch may surface later instead — the batch is then
            redone message by message without pipeline. Switch off for handlers that cannot
            live with that.
        guard_cache_size: how many guard rows (aggregates) the fast path keeps in memory after
            committing them, to skip reading them again (0 = off). Safe when stale: the inbox
            claim decides duplicates and the guard upsert is conditional, so a stale entry only
            sends the batch to the savepoint path.
        dlq_topic / redrive_topic: default ``<consumer>.dlq`` / ``<consumer>.redrive``.
        ensure_topics: create the DLQ and re-drive topics at start if missing.
        ensure_schema: create the inbox/guard/held tables at start if missing.
        dlq_flush_timeout_s: how long to wait for dead-letter deliveries before giving up on a batch.
        retry_state_retention_s: how long the ``consumer_retry`` row of a dead-lettered message
            is kept (default 7 days): within it, a redelivery of the same message after a crash
            between the database commit and the dead letter's delivery is dead-lettered again
            with its recorded attempt count instead of being tried again.
        shutdown_grace_s: when ``stop`` is set, how long the batch in flight may still run
            (seconds, default 15). Past it the runtime ends that batch's database session
            (``pg_terminate_backend``: its transaction rolls back, also when the handler waits
            on a row lock or an external call), commits only the offsets of finished batches,
            leaves the group and returns; the batch is redelivered. Keep it, plus a few
            seconds to leave the group, below the pod's ``terminationGracePeriodSeconds``.
        stall_after_s: the runtime counts as stalled when one step of its loop (a
            ``consume`` call with the rebalance callbacks it runs, waiting for the batch in
            the database, a synchronous offset commit) has not returned for this long
            (default 120 s: longer than ``max_batch_s`` and than a broker restart's typical
            outage). A stall is logged at ERROR once (phase, seconds, assigned and paused
            partitions), fails the ``consumer`` readiness check, and its end is logged.
        key_concurrency: how many events of *different aggregates* are applied at once
            (default 1: a poll batch at a time, in offset order). Above 1 the runtime queues
            records per aggregate and that many worker threads (one pool connection each) apply
            units of them, each unit one transaction; one aggregate's events stay in offset
            order and the committed offset of a partition never passes an event not yet
            applied (the ``KEY`` ordering of Confluent Parallel Consumer). Inbox, guard,
            retries and dead letters work as with 1. For handlers that wait on I/O (an HTTP
            call, a mail server); the pool needs one connection per worker thread and one
            for the loop: ``key_concurrency + 1``, or with coroutine (``async def``)
            ``PROJECTION``/``PROCESS`` handlers ``ceil(key_concurrency / 8) + 1``: the worker
            threads (one per ``casestream.consumer.keyworkers.CALLS_PER_WORKER`` calls) then
            hand their units' calls to one shared event loop, which awaits at most
            ``key_concurrency`` of them at once (``casestream.consumer.handlerloop``).
        rejoin_timeout_s: how long the runtime waits for a partition assignment after it
            subscribed or its partitions were revoked or lost. An assignment callback, even
            one with no partitions, ends the wait. Past it the runtime closes its Kafka
            consumer and joins the group with a new one (logged at ERROR, counted in
            ``ConsumerStats.consumer_restarts``), so a client whose group join never
            completes (the join request stuck in librdkafka's queue after a broker restart)
            does not leave its partitions unread. None (default): ``max.poll.interval.ms +
            session.timeout.ms`` of the consumer config (345 s with the defaults), since the
            coordinator may wait ``max.poll.interval.ms`` (the rebalance timeout) for a slow
            member to rejoin. A shorter bound only makes such a rebalance start over.
        commit_interval_s: in the loop, offsets of applied batches are committed to Kafka at
            most this often (seconds, default 1.0; 0: after every batch, one commit in flight
            at a time). The inbox decides duplicates, so a crash or a lost assignment only
            redelivers what was applied since the last commit; a revoke and a shutdown commit
            at once. Each ``OffsetCommit`` is a broker request (bench/README.md, "Where a
            journey's CPU goes").
        group_protocol: Kafka's consumer group protocol (librdkafka ``group.protocol``).
            ``classic`` (default): the JoinGroup/SyncGroup protocol with librdkafka's eager
            assignors, or ``cooperative-sticky`` (incremental) when ``kafka_config`` sets
            ``partition.assignment.strategy``; works with every broker. ``consumer``: the
            next-generation protocol (KIP-848, broker-side assignment, incremental
            revocations; Kafka >= 4.0 brokers, which enable it by default through
            ``group.coordinator.rebalance.protocols``); librdkafka then rejects the client-side
            ``partition.assignment.strategy``, ``session.timeout.ms``,
            ``heartbeat.interval.ms`` and ``group.protocol.type`` (the broker's
            ``group.consumer.*`` settings govern them), so the runtime refuses them at start.
    """

    batch_size: int = 500
    poll_timeout_s: float = 0.5
    max_batch_s: float = 30.0
    heartbeat_after_s: float = 2.0
    retry: RetryPolicy = field(default_factory=_default_retry)
    gap_hold_s: float = 30.0
    sweep_interval_s: float = 1.0
    first_seen: FirstSeenPolicy = FirstSeenPolicy.STRICT
    strict_types: bool = False
    mode: ProcessingMode = ProcessingMode.LIVE
    fast_path: bool = True
    pipeline_handlers: bool = True
    guard_cache_size: int = 100_000
    dlq_topic: str | None = None
    redrive_topic: str | None = None
    ensure_topics: bool = True
    ensure_schema: bool = True
    dlq_flush_timeout_s: float = 30.0
    retry_state_retention_s: float = 7 * 86400.0
    stall_after_s: float = 120.0
    shutdown_grace_s: float = 15.0
    key_concurrency: int = 1
    rejoin_timeout_s: float | None = None
    commit_interval_s: float = 1.0
    group_protocol: str = "classic"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("consumer batch_size must be >= 1")
        if (self.gap_hold_s < 0 or self.max_batch_s <= 0 or self.heartbeat_after_s <= 0
                or self.stall_after_s <= 0 or self.shutdown_grace_s <= 0
                or not 0 <= self.commit_interval_s < math.inf
                or (self.rejoin_timeout_s is not None
                    and not (math.isfinite(self.rejoin_timeout_s) and self.rejoin_timeout_s > 0))):
            raise ConfigError("consumer durations must be positive (rejoin_timeout_s: finite; "
                              "commit_interval_s: finite, >= 0)")
        if self.key_concurrency < 1:
            raise ConfigError(f"consumer key_concurrency must be >= 1, got {self.key_concurrency}")
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise ConfigError(f"consumer group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, "
                              f"got {self.group_protocol!r}")
        if not self.retry.bounded:
            raise ConfigError("consumer retry needs max_attempts or max_elapsed_s: a message "
                              "that keeps failing must end in the dead-letter topic")

    def dlq_topic_for(self, consumer: str) -> str:
        """The dead-letter topic of ``consumer`` (``<consumer>.dlq`` unless overridden)."""
        return self.dlq_topic or f"{consumer}.dlq"

    def redrive_topic_for(self, consumer: str) -> str:
        """The re-drive topic of ``consumer`` (``<consumer>.redrive`` unless overridden)."""
        return self.redrive_topic or f"{consumer}.redrive"
