"""Apply one poll batch of Kafka records to PostgreSQL: decode, guard, inbox, handlers, dead letters.

Driver module (psycopg) without Kafka: the runtime (``runtime.py``) feeds it records and
commits offsets from the :class:`BatchResult`; tests and the replay tool can drive it directly.
The connection must be in autocommit mode (transactions are explicit).

1. decode every record (``EnvelopeDecoder``); poison → dead letter at once;
2. **fast path** (default): the whole batch in *one* transaction in psycopg pipeline mode —
   round trip 1 inserts the batch's inbox rows where absent (``ON CONFLICT DO NOTHING
   RETURNING``: what comes back is new, the rest are duplicates) and reads its guard rows;
   every record is decided in memory (``casestream.handlers.guard``); round trip 2 sends one statement
   advancing the guard rows followed by the handlers' statements; then COMMIT. Batch
   parameters travel as one JSON document and every row access is a primary-key probe. Batch handlers (``HandlerRegistry.on_batch``) get each run of consecutive events
   in one call. Taken only when every record is a plain apply / duplicate / stale on a
   flowing aggregate and no ``SIDE_EFFECT`` handler is involved. If anything raises, the
   transaction rolls back and the batch is redone on the slow path (a non-database exception
   of a per-event handler counts as that message's attempt, so it is not called twice);
3. **slow path**: one transaction with a savepoint per message (inbox row + guard row +
   handlers together), so one failure rolls back only its own message. A retryable failure
   *cuts* its partition: earlier messages commit, this one and later ones of the partition
   are rewound and retried after a backoff (the runtime pauses that partition only); poison
   or exhausted attempts → dead letter. Attempt counts and next-attempt times are rows of
   ``consumer_retry`` written in this transaction: a message another member (or this process
   before a restart) failed waits the rest of its backoff — a cut without an attempt — and
   its count goes on. A batch with such a row never takes the fast path. Gaps hold events (``casestream.consumer.inbox``); applying the
   missing version drains them in the same transaction;
4. dead letters of the batch are flushed after the commit and *before* the caller commits
   offsets; a batch that fails as a whole raises (nothing of it committed but dead letters,
   which are idempotent to repeat);
5. the sweep (when due, own transaction): parks aggregates whose hold expired (dead letter
   ``version_gap``, flushed before that commit) and drains held events that became contiguous.

Tracing (``casestream.telemetry``): a per-event handler call runs in a CONSUMER span that is a
child of the message's ``traceparent`` (so follow-up outbox rows continue the trace); a batch
handler call runs in one span linked to every message's context.

Per-aggregate order holds because a partition is processed in offset order and a cut stops
the rest of its partition; across partitions/topics the version guard keeps order.

:class:`BatchProcessor` holds the public surface (``decode``, ``process``, ``sweep``,
``forget``, ...) and composes collaborators that own their state: ``Dispatcher``
(``batch_dispatch``: verdicts, handler calls), ``FastPath`` and ``GuardCache`` (``batch_fast``),
``MessageApplier`` and ``SavepointPath`` (``batch_slow``), ``HeldEvents`` (``batch_held``:
draining, sweep) and ``FailureHandler`` (``batch_failures``: durable attempt counts in
``consumer_retry`` (``casestream.consumer.retries``), owed backoffs, cuts, dead letters). The batch values live in ``batch_model`` and are re-exported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_failures import FailureHandler
from casestream.consumer.batch_fast import FastPath, GuardCache
from casestream.consumer.batch_held import HeldEvents
from casestream.consumer.batch_model import (  # noqa: F401 - re-exported (public API)
    TP,
    Action,
    BatchResult,
    Decoded,
    Item,
    decode_record,
    held_record,
    item_of,
)
from casestream.consumer.batch_slow import MessageApplier, SavepointPath
from casestream.consumer.failures import FailureClass, classify
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.settings import ConsumerSettings
from casestream.consumer.deadletters import DeadLetter, DeadLetterSink
from casestream.errors import PoisonMessageError
from casestream.consumer.handlerloop import HandlerLoop
from casestream.handlers.registry import DiscardingOutbox, HandlerRegistry, OutboxAppender
from casestream.handlers.processing import ProcessingMode
from casestream.consumer.retries import purge_dead_lettered, retry_key

log = logging.getLogger("casestream.consumer")

_PURGE_EVERY_S = 60.0  # dead-lettered retry rows are few; purging them once a minute is plenty


class BatchProcessor:
    """Applies batches for one consumer name. Not thread-safe: one batch at a time.

    Args:
        consumer: inbox consumer name (= group id), e.g. ``"billing.invoices"``.
        handlers: the handler registry.
        decoder: ``EnvelopeDecoder`` (``casestream.events.codec.EnvelopeCodec``).
        dead_letters: where dead letters go (``casestream.consumer.deadletters.KafkaDeadLetters``).
        settings: policy (retry, gap hold, first-seen, strict types, mode, fast path).
        outbox: appender given to handlers as ``ctx.outbox`` (REPLAY always discards).
        stats: counters to update (a fresh ``ConsumerStats`` by default).
        guard_cache: share this guard-row cache (several processors of one consumer applying
            different aggregates at once); default: its own of ``settings.guard_cache_size``.
        handler_concurrency: most coroutine (``async def``) handler calls the fast path awaits
            at once, over different aggregates (default 1: one after the other).
        handler_loop: await coroutine handlers on this shared loop, within its slots
            (default: an event loop of the processor's own).
    """

    def __init__(self, *, consumer: str, handlers: HandlerRegistry, decoder: EnvelopeDecoder,
                 dead_letters: DeadLetterSink, settings: ConsumerSettings | None = None,
                 outbox: OutboxAppender | None = None, stats: ConsumerStats | None = None,
                 guard_cache: GuardCache | None = None, handler_concurrency: int = 1,
                 handler_loop: HandlerLoop | None = None) -> None:
        self.consumer = consumer
        self.handlers = handlers
        self.decoder = decoder
        self.dead_letters = dead_letters
        self.settings = settings or ConsumerSettings()
        self.mode = self.settings.mode
        self.discarding = DiscardingOutbox()
        self.outbox: OutboxAppender = (
            outbox if outbox is not None and self.mode is ProcessingMode.LIVE else self.discarding
        )
        self.stats = stats or ConsumerStats()
        self.redrive_topic = self.settings.redrive_topic_for(consumer)
        self._next_purge = 0.0
        s = self.settings
        self._cache = guard_cache if guard_cache is not None else GuardCache(s.guard_cache_size)
        self._failures = FailureHandler(consumer=consumer, policy=s.retry, stats=self.stats,
                                        dead_letters=dead_letters)
        self._dispatch = Dispatcher(consumer=consumer, handlers=handlers, mode=self.mode,
                                    outbox=self.outbox, first_seen=s.first_seen,
                                    strict_types=s.strict_types, redrive_topic=self.redrive_topic,
                                    loop=handler_loop)
        applier = MessageApplier(consumer=consumer, dispatch=self._dispatch, stats=self.stats)
        self._held = HeldEvents(consumer=consumer, decoder=decoder, applier=applier,
                                failures=self._failures, cache=self._cache, stats=self.stats,
                                policy=s.retry, gap_hold_s=s.gap_hold_s)
        self._fast = FastPath(consumer=consumer, dispatch=self._dispatch, failures=self._failures,
                              cache=self._cache, stats=self.stats, pipeline=s.pipeline_handlers,
                              concurrency=handler_concurrency)
        self._slow = SavepointPath(consumer=consumer, dispatch=self._dispatch, applier=applier,
                                   held=self._held, failures=self._failures, cache=self._cache,
                                   stats=self.stats, max_batch_s=s.max_batch_s,
                                   gap_hold_s=s.gap_hold_s)

    # ------------------------------------------------------------------ public

    def decode(self, records: Sequence[Record]) -> Decoded:
        """Decode ``records`` without side effects (no counters, no attempts): the runtime calls
        this on its main thread for the next batch while the current one is in the database."""
        out: list[tuple[Record, Any, BaseException | None]] = []
        decoder = self.decoder
        for rec in records:
            if rec.value is None:
                out.append((rec, None, PoisonMessageError("message has no value",
                                                          reason="empty_value")))
                continue
            try:
                out.append((rec, decode_record(decoder, rec.value, rec.published_at), None))
            except Exception as e:  # noqa: BLE001 - classified in process()
                out.append((rec, None, e))
        return Decoded(out)

    def process(self, conn: Any, records: Sequence[Record] | Decoded, *,
                sweep: bool = False) -> BatchResult:
        """Apply ``records`` (one poll batch, offset order per partition; or its :meth:`decode`
        result) in one transaction.

        Returns the offsets to commit and the partitions to rewind. Raises only for
        batch-level failures (connection lost, dead-letter delivery failed, ...): nothing was
        committed then and the caller retries the whole batch after a backoff.
        """
        t0 = time.monotonic()
        result = BatchResult()
        dead: list[DeadLetter] = []
        decoded = records if isinstance(records, Decoded) else self.decode(records)
        records = decoded.records
        items = self._triage(conn, decoded, result, dead)
        try:
            if items:
                fast = self.settings.fast_path
                if fast and self._fast.try_apply(conn, items):
                    result.fast = True
                else:
                    with conn.transaction():
                        self._slow.apply(conn, items, result, dead, t0,
                                         self._fast.handler_failure if fast else None)
        except Exception as e:
            if len(records) == 1 and items and classify(e, conn) is FailureClass.RETRYABLE:
                # A single message whose transaction cannot commit: its own failure.
                return self._failures.single_commit_failure(conn, records[0], e)
            raise
        if result.rewinds and dead:
            dead = self._behind_cuts(records, result, dead)
        self._failures.send(dead)  # before the caller commits offsets past them
        if sweep:
            try:
                self.sweep(conn)
            except Exception as e:  # noqa: BLE001 - the batch itself is committed
                if classify(e, conn) is FailureClass.INFRA:
                    raise
                log.exception("%s: sweep of held/parked aggregates failed; retried later",
                              self.consumer)
        if records:
            self.stats.batches += 1
            self.stats.fast_batches += int(result.fast)
        return result

    def _triage(self, conn: Any, decoded: Decoded, result: BatchResult,
                dead: list[DeadLetter]) -> list[Item]:
        """Decoded items in order; decode failures dead-lettered (poison) or cut (retryable)
        unless their retry row says they still wait (or were dead-lettered already)."""
        failures = self._failures
        if any(err is not None for _rec, _env, err in decoded.entries):
            failures.load(conn, [retry_key(rec) for rec, _env, err in decoded.entries
                                 if err is not None])
        items: list[Item] = []
        for rec, env, err in decoded.entries:
            tp = rec.tp
            if tp in result.rewinds:
                continue
            result.commits[tp] = rec.offset + 1
            if err is not None:
                if not failures.owed(rec, None, result, dead, conn):
                    failures.failed(rec, err, None, result, dead, conn)
                continue
            items.append(item_of(rec, env))
        return items

    @staticmethod
    def _behind_cuts(records: Sequence[Record], result: BatchResult,
                     dead: list[DeadLetter]) -> list[DeadLetter]:
        """Drop dead letters of this batch's records at/after a cut: they will be consumed again."""
        mine = {id(r) for r in records}
        keep = []
        for d in dead:
            r = d.record
            cut = result.rewinds.get(r.tp)
            if id(r) in mine and cut is not None and r.offset >= cut[0]:
                continue
            keep.append(d)
        return keep

    def sweep(self, conn: Any) -> None:
        """Run the held/parked sweep on its own (one transaction); at most every
        ``_PURGE_EVERY_S`` also purge dead-lettered retry rows past
        ``settings.retry_state_retention_s``."""
        dead: list[DeadLetter] = []
        with conn.transaction():
            self._held.sweep(conn, dead)
            self._failures.send(dead)
        now = time.monotonic()
        if now >= self._next_purge:
            self._next_purge = now + _PURGE_EVERY_S
            purge_dead_lettered(conn, self.consumer, self.settings.retry_state_retention_s)

    def forget(self, tps: Sequence[TP]) -> None:
        """Partitions no longer assigned: drop the guard cache (another instance may own
        those aggregates now) and this member's retry hints (the counts stay durable)."""
        self._cache.clear()
        self._failures.forget(tps)

    def close(self) -> None:
        """Release what coroutine handlers needed (the event loop); the processor may be
        used again afterwards."""
        self._dispatch.close()

    def attempts_of(self, conn: Any, rec: Record) -> int:
        """Failed attempts recorded so far for ``rec`` in ``consumer_retry`` (0 if none)."""
        return self._failures.count(conn, rec)

    @property
    def guard_cache(self) -> GuardCache:
        """This processor's guard-row cache (to share with processors of the same consumer)."""
        return self._cache

    @property
    def discarded_outbox(self) -> int:
        """Follow-up events dropped because of REPLAY mode or a missing outbox."""
        return self.discarding.discarded


__all__ = ["Action", "BatchProcessor", "BatchResult", "Decoded", "held_record"]
