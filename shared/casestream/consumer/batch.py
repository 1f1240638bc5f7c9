"""Apply one poll batch of Kafka records to PostgreSQL: decode, guard, inbox, handlers, dead letters.

Driver module (psycopg) without Kafka: the runtime (``runtime.py``) feeds it records and
commits offsets from the :class:`BatchResult`; tests and the replay tool can drive it directly.
The connection must be in autocommit mode (transactions are explicit).

1. decode every record (``EnvelopeDecoder``); poison → dead letter at once;
2. **fast path** (default): the whole batch in *one* transaction in psycopg pipeline mode —
   round trip 1 inserts the batch's inbox rows where absent (``ON CONFLICT DO NOTHING
   RETURNING``: what comes back is new, the rest are duplicates) and reads its guard rows;
   every record is decided in memory (``casestream.guard``); round trip 2 sends one statement
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
   or exhausted attempts → dead letter. Gaps hold events (``casestream.inbox``); applying the
   missing version drains them in the same transaction;
4. dead letters of the batch are flushed after the commit and *before* the caller commits
   offsets; a batch that fails as a whole raises (nothing of it committed but dead letters,
   which are idempotent to repeat);
5. the sweep (when due, own transaction): parks aggregates whose hold expired (dead letter
   ``version_gap``, flushed before that commit) and drains held events that became contiguous.

Tracing (issue 9, ``casestream.telemetry``): a per-event handler call runs in a CONSUMER span
that is a child of the message's ``traceparent`` (so follow-up outbox rows continue the trace);
a batch handler call runs in one span linked to every message's context.

Per-aggregate order holds because a partition is processed in offset order and a cut stops
the rest of its partition; across partitions/topics the version guard keeps order.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg

from casestream import telemetry
from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.settings import ConsumerSettings
from casestream.dlq import H_ACCEPT_GAP, DeadLetter, DeadLetterSink
from casestream.errors import PoisonMessageError
from casestream.guard import AggregateState, Verdict, decide
from casestream.handlers import DiscardingOutbox, HandlerContext, HandlerRegistry, OutboxAppender
from casestream.inbox import (
    GuardRow,
    HeldEvent,
    InboxEntry,
    advance_batch,
    advance_guards,
    check_advanced,
    claim_inbox,
    held_events,
    hold,
    insert_inbox,
    known_event_ids,
    load_guards,
    query_guards,
    read_claimed,
    read_guards,
    record_held_failure,
    release_held,
    set_last_version,
    set_state,
    waiting_aggregates,
)
from casestream.processing import ProcessingMode

log = logging.getLogger("casestream.consumer")

TP = tuple[str, int]


class Action(enum.Enum):
    """What the processor does with one decoded record."""

    APPLY = "apply"
    ACCEPT_GAP = "accept_gap"
    HOLD = "hold"
    DUPLICATE = "duplicate"
    STALE = "stale"
    UNKNOWN_STRICT = "unknown_strict"


class _Ineligible(Exception):
    """The batch needs per-message handling (gap, held aggregate, side effect, strict type...)."""


@dataclass(slots=True)
class _Item:
    rec: Record
    env: Any

    @property
    def key(self) -> tuple[str, str]:
        return (self.env.aggregate_type, self.env.aggregate_id)

    def entry(self) -> InboxEntry:
        e = self.env
        return InboxEntry(event_id=e.event_id, event_type=e.event_type,
                          aggregate_type=e.aggregate_type, aggregate_id=e.aggregate_id,
                          aggregate_version=e.aggregate_version)


@dataclass(frozen=True, slots=True)
class Decoded:
    """A batch after decoding: (record, envelope or None, decode error or None) in order."""

    entries: list[tuple[Record, Any, BaseException | None]]

    @property
    def records(self) -> list[Record]:
        return [e[0] for e in self.entries]

    def without(self, drop: Any) -> Decoded:
        """The entries whose record does not satisfy ``drop(record)``."""
        return Decoded([e for e in self.entries if not drop(e[0])])

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(slots=True)
class _Attempt:
    count: int
    first: datetime
    last: datetime


@dataclass(slots=True)
class BatchResult:
    """What the runtime must do with offsets after the transaction committed.

    commits: next offset to commit per (topic, partition) = last processed + 1, or the offset of
        the first message not processed (cut).
    rewinds: (topic, partition) -> (offset to seek to, seconds to keep the partition paused).
    fast: the batch went through the fast path.
    """

    commits: dict[TP, int] = field(default_factory=dict)
    rewinds: dict[TP, tuple[int, float]] = field(default_factory=dict)
    fast: bool = False

    def cut(self, tp: TP, offset: int, delay_s: float) -> None:
        """Stop processing ``tp`` at ``offset``: commit up to it, rewind there after ``delay_s``."""
        self.commits[tp] = offset
        self.rewinds[tp] = (offset, delay_s)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class BatchProcessor:
    """Applies batches for one consumer name. Not thread-safe: one batch at a time.

    Args:
        consumer: inbox consumer name (= group id), e.g. ``"audit.journal"``.
        handlers: the handler registry.
        decoder: ``EnvelopeDecoder`` (``casestream.codec.EnvelopeCodec``).
        dead_letters: where dead letters go (``casestream.dlq.KafkaDeadLetters``).
        settings: policy (retry, gap hold, first-seen, strict types, mode, fast path).
        outbox: appender given to handlers as ``ctx.outbox`` (REPLAY always discards).
        stats: counters to update (a fresh ``ConsumerStats`` by default).
    """

    def __init__(self, *, consumer: str, handlers: HandlerRegistry, decoder: EnvelopeDecoder,
                 dead_letters: DeadLetterSink, settings: ConsumerSettings | None = None,
                 outbox: OutboxAppender | None = None, stats: ConsumerStats | None = None) -> None:
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
        self._attempts: dict[tuple[str, int, int], _Attempt] = {}
        # (id of the record whose handler raised on the fast path, the exception): that call is
        # the message's attempt, so the slow path does not call the handler a second time.
        self._fast_failure: tuple[int, BaseException] | None = None
        # aggregate -> last version, for rows this processor committed as 'flowing' on the fast
        # path (see ConsumerSettings.guard_cache_size for why staleness is harmless)
        self._guard_cache: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------ public

    def decode(self, records: Sequence[Record]) -> Decoded:
        """Decode ``records`` without side effects (no counters, no attempts): the runtime calls
        this on its main thread for the next batch while the current one is in the database."""
        out: list[tuple[Record, Any, BaseException | None]] = []
        decode = self.decoder.decode
        for rec in records:
            if rec.value is None:
                out.append((rec, None, PoisonMessageError("message has no value",
                                                          reason="empty_value")))
                continue
            try:
                out.append((rec, decode(rec.value, published_at=rec.published_at), None))
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
        self._fast_failure = None
        decoded = records if isinstance(records, Decoded) else self.decode(records)
        records = decoded.records
        items = self._triage(decoded, result, dead)
        try:
            if items:
                if self.settings.fast_path and self._try_fast(conn, items):
                    result.fast = True
                else:
                    with conn.transaction():
                        self._slow(conn, items, result, dead, t0)
        except Exception as e:
            if len(records) == 1 and items and classify(e, conn) is FailureClass.RETRYABLE:
                # A single message whose transaction cannot commit: its own failure.
                return self._single_commit_failure(conn, records[0], e)
            raise
        if result.rewinds and dead:
            dead = self._behind_cuts(records, result, dead)
        self._send(dead)  # before the caller commits offsets past them
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
        """Run the held/parked sweep on its own (one transaction)."""
        dead: list[DeadLetter] = []
        with conn.transaction():
            self._sweep(conn, dead)
            self._send(dead)

    def forget(self, tps: Sequence[TP]) -> None:
        """Drop in-memory attempt counts of partitions no longer assigned, and the guard cache
        (another instance may own those aggregates now)."""
        self._guard_cache.clear()
        gone = set(tps)
        for pos in [p for p in self._attempts if (p[0], p[1]) in gone]:
            del self._attempts[pos]

    def attempts_of(self, rec: Record) -> int:
        """Failed attempts recorded so far for ``rec`` (0 if none)."""
        a = self._attempts.get((rec.topic, rec.partition, rec.offset))
        return a.count if a else 0

    @property
    def discarded_outbox(self) -> int:
        """Follow-up events dropped because of REPLAY mode or a missing outbox."""
        return self.discarding.discarded

    # ------------------------------------------------------------------ decode

    def _triage(self, decoded: Decoded, result: BatchResult,
                dead: list[DeadLetter]) -> list[_Item]:
        """Decoded items in order; decode failures dead-lettered (poison) or cut (retryable)."""
        items: list[_Item] = []
        for rec, env, err in decoded.entries:
            tp = rec.tp
            if tp in result.rewinds:
                continue
            result.commits[tp] = rec.offset + 1
            if err is not None:
                self._failed(rec, err, None, result, dead)
                continue
            items.append(_Item(rec, env))
        return items

    # ------------------------------------------------------------------ verdicts

    def _action(self, item: _Item, known: set[str], seen: set[str],
                guards: dict[tuple[str, str], GuardRow]) -> Action:
        env = item.env
        if env.event_id in known or env.event_id in seen:
            return Action.DUPLICATE
        g = guards.get(item.key)
        last = g.last_version if g is not None else None
        try:
            verdict = decide(last, env.aggregate_version, self.settings.first_seen)
        except ValueError as e:
            raise PoisonMessageError(str(e), reason="validation") from e
        if verdict is Verdict.STALE:
            return Action.STALE
        if verdict is Verdict.GAP:
            if item.rec.topic == self.redrive_topic and item.rec.header(H_ACCEPT_GAP) == "true":
                return Action.ACCEPT_GAP
            return Action.HOLD
        if self.settings.strict_types and not self.handlers.knows(env.event_type):
            return Action.UNKNOWN_STRICT
        return Action.APPLY

    # ------------------------------------------------------------------ fast path

    def _try_fast(self, conn: Any, items: list[_Item]) -> bool:
        """The whole batch in one pipelined transaction; False if not eligible or it failed
        (then rolled back: the caller redoes the batch with a savepoint per message)."""
        if self._attempts and any(
                (it.rec.topic, it.rec.partition, it.rec.offset) in self._attempts for it in items):
            return False  # a message being retried: go straight to per-message savepoints
        counters: dict[str, Any] = {}
        try:
            if self.settings.pipeline_handlers:
                with conn.pipeline() as pipeline, conn.transaction():
                    self._fast(conn, pipeline, items, counters)
            else:
                with conn.transaction():
                    self._fast(conn, None, items, counters)
        except _Ineligible:
            self._uncache(items)
            return False
        except Exception as e:
            self._uncache(items)
            if classify(e, conn) is FailureClass.INFRA:
                raise
            log.debug("%s: fast path failed (%s: %s); redoing batch with savepoints",
                      self.consumer, type(e).__name__, e)
            return False
        self._cache_guards(counters["guards"])
        st = self.stats
        st.applied += counters["applied"]
        st.duplicates += counters["dup"]
        st.stale += counters["stale"]
        st.unknown_type += counters["unknown"]
        if self._attempts:
            for it in items:
                self._attempts.pop((it.rec.topic, it.rec.partition, it.rec.offset), None)
        return True

    def _fast(self, conn: Any, pipeline: Any, items: list[_Item], counters: dict[str, int]) -> None:
        """Round trip 1: inbox + guard reads. Round trip 2: inbox/guard writes (one statement)
        and the handlers' statements, pipelined (``pipeline`` None: not pipelined). Then COMMIT.
        Raises _Ineligible to bail out."""
        keys = {it.key for it in items}
        cache = self._guard_cache
        start = {k: GuardRow(cache[k], AggregateState.FLOWING) for k in keys if k in cache}
        missing = keys - start.keys() if start else keys
        claim_cur = claim_inbox(conn, self.consumer, [it.entry() for it in items])
        guards_cur = query_guards(conn, self.consumer, missing) if missing else None
        claimed = read_claimed(claim_cur)
        known = {it.env.event_id for it in items} - claimed  # recorded before this batch
        if guards_cur is not None:
            start.update(read_guards(guards_cur))
        guards = {k: GuardRow(g.last_version, g.state, g.exists) for k, g in start.items()}
        seen: set[str] = set()
        apply: list[_Item] = []
        dup = stale = 0
        for it in items:
            action = self._action(it, known, seen, guards)
            if action is Action.DUPLICATE:
                dup += 1
                continue
            if action is Action.STALE:
                stale += 1
                continue
            if action is not Action.APPLY:
                raise _Ineligible
            g = guards.get(it.key)
            if g is not None and g.state is not AggregateState.FLOWING:
                raise _Ineligible
            if self.handlers.has_side_effects(it.env.event_type, self.mode):
                raise _Ineligible
            if g is None:
                guards[it.key] = GuardRow(it.env.aggregate_version, AggregateState.FLOWING, False)
            else:
                g.last_version = it.env.aggregate_version
            seen.add(it.env.event_id)
            apply.append(it)
        unknown = 0
        if apply:
            updates = []
            for key, g in guards.items():
                s = start.get(key)
                if s is None:
                    updates.append((key[0], key[1], None, g.last_version))
                elif g.last_version != s.last_version:
                    updates.append((key[0], key[1], s.last_version, g.last_version))
            recorded = advance_batch(conn, self.consumer, updates)
            # Pipeline mode: handler statements are sent without waiting for each result;
            # errors surface at the next sync. A psycopg error may thus show up in a later
            # handler, so only non-database exceptions are attributed to an item.
            unknown = self._fast_handlers(conn, apply)
            if pipeline is not None:
                pipeline.sync()
            check_advanced(recorded)
        counters.update(applied=len(apply), dup=dup, stale=stale, unknown=unknown, guards=guards)

    # ------------------------------------------------------------------ slow path

    def _slow(self, conn: Any, items: list[_Item], result: BatchResult,
              dead: list[DeadLetter], t0: float) -> None:
        self._uncache(items)
        known = known_event_ids(conn, self.consumer, [it.env.event_id for it in items])
        guards = load_guards(conn, self.consumer, {it.key for it in items})
        seen: set[str] = set()
        for it in items:
            rec = it.rec
            if rec.tp in result.rewinds:
                continue
            if time.monotonic() - t0 > self.settings.max_batch_s:
                result.cut(rec.tp, rec.offset, 0.0)
                continue
            try:
                action = self._action(it, known, seen, guards)
            except PoisonMessageError as e:
                self._failed(rec, e, it.env, result, dead)
                continue
            if action is Action.DUPLICATE:
                self.stats.duplicates += 1
            elif action is Action.STALE:
                self.stats.stale += 1
            elif action is Action.UNKNOWN_STRICT:
                self._failed(rec, PoisonMessageError(
                    f"no handler for event type {it.env.event_type!r} (strict mode)",
                    reason="unknown_event_type"), it.env, result, dead)
            elif action is Action.HOLD:
                self._hold(conn, it, guards, seen, result, dead)
            elif self._fast_failure is not None and self._fast_failure[0] == id(rec):
                # its handler already failed on the fast path: that was this attempt
                self._failed(rec, self._fast_failure[1], it.env, result, dead, conn)
                self._fast_failure = None
            else:
                if self._apply_one(conn, it, guards, result, dead,
                                   accept_gap=action is Action.ACCEPT_GAP):
                    seen.add(it.env.event_id)
                    g = guards[it.key]
                    if g.state is not AggregateState.FLOWING:
                        self._drain(conn, it.key, guards, known, seen, dead, advanced=True)

    def _hold(self, conn: Any, it: _Item, guards: dict[tuple[str, str], GuardRow],
              seen: set[str], result: BatchResult, dead: list[DeadLetter]) -> None:
        rec, env = it.rec, it.env
        g = guards.get(it.key)
        base = g.last_version if g is not None else 0
        try:
            with conn.transaction():
                new = hold(conn, self.consumer, event=it.entry(), topic=rec.topic,
                           partition=rec.partition, offset=rec.offset, key=rec.key,
                           value=rec.value or b"", headers=rec.headers,
                           timestamp_ms=rec.timestamp_ms, base_version=base,
                           hold_s=self.settings.gap_hold_s)
        except Exception as e:  # noqa: BLE001
            self._failed(rec, e, env, result, dead, conn)
            return
        if g is None:
            guards[it.key] = GuardRow(base, AggregateState.HOLDING)
        elif g.state is AggregateState.FLOWING:
            g.state = AggregateState.HOLDING
        seen.add(env.event_id)
        if new:
            self.stats.held += 1
            log.info("%s: %s %s v%d held behind a gap (last recorded v%d)", self.consumer,
                     env.aggregate_type, env.aggregate_id, env.aggregate_version, base)

    def _apply_one(self, conn: Any, it: _Item, guards: dict[tuple[str, str], GuardRow],
                   result: BatchResult, dead: list[DeadLetter], *, accept_gap: bool = False) -> bool:
        """Apply one live record in its own savepoint; on failure classify it. True if applied."""
        try:
            self._apply_tx(conn, it, guards, accept_gap=accept_gap)
        except Exception as e:  # noqa: BLE001 - classified in _failed
            self._failed(it.rec, e, it.env, result, dead, conn)
            return False
        if self._attempts:
            self._attempts.pop((it.rec.topic, it.rec.partition, it.rec.offset), None)
        return True

    def _apply_tx(self, conn: Any, it: _Item, guards: dict[tuple[str, str], GuardRow], *,
                  accept_gap: bool = False, held: HeldEvent | None = None) -> None:
        """Savepoint { inbox row, guard row, handlers[, release held row] }; raises on failure.

        Updates the in-memory guard copy and the counters only after the savepoint is released.
        """
        rec, env = it.rec, it.env
        g = guards.get(it.key)
        expected = g.last_version if g is not None and g.exists else None
        version = env.aggregate_version
        with conn.transaction():
            if accept_gap:
                set_last_version(conn, self.consumer, it.key, version - 1)
                expected = version - 1
            insert_inbox(conn, self.consumer, [it.entry()])
            advance_guards(conn, self.consumer,
                           [(it.key[0], it.key[1], expected, version)], require_flowing=False)
            unknown = self._run_handlers(conn, rec, env)
            if held is not None:
                release_held(conn, self.consumer, held.event_id)
        if g is None:
            guards[it.key] = GuardRow(version, AggregateState.FLOWING)
        else:
            g.last_version = version
            g.exists = True
        if accept_gap:
            self.stats.accepted_gaps += 1
            log.warning("%s: accepted gap for %s %s: recorded v%d as last before v%d (re-drive)",
                        self.consumer, it.key[0], it.key[1], version - 1, version)
        self.stats.applied += 1
        self.stats.unknown_type += unknown

    def _cache_guards(self, guards: dict[tuple[str, str], GuardRow]) -> None:
        """Remember the guard rows a committed fast-path batch left flowing."""
        limit = self.settings.guard_cache_size
        if limit <= 0:
            return
        cache = self._guard_cache
        if len(cache) + len(guards) > limit:
            cache.clear()  # crude but bounded; refilled from the database on the next batches
        for key, g in guards.items():
            if g.state is AggregateState.FLOWING:
                cache[key] = g.last_version

    def _uncache(self, items: Sequence[_Item]) -> None:
        if self._guard_cache:
            for it in items:
                self._guard_cache.pop(it.key, None)

    def _fast_handlers(self, conn: Any, apply: list[_Item]) -> int:
        """Run the handlers of ``apply`` in order; returns how many events had none."""
        unknown = 0
        for run, hs in self._runs(apply):
            if len(run) > 1 or (hs and hs[0].batch):
                self._run_batch(conn, run, hs)
                continue
            it = run[0]
            try:
                unknown += self._run_handlers(conn, it.rec, it.env)
            except psycopg.Error:
                raise
            except Exception as e:
                self._fast_failure = (id(it.rec), e)
                raise
        return unknown

    def _runs(self, apply: list[_Item]) -> list[tuple[list[_Item], tuple[Any, ...]]]:
        """Split ``apply`` into runs: consecutive events whose handlers are all batch handlers
        and identical form one run; every other event is a run of its own. Order is kept."""
        runs: list[tuple[list[_Item], tuple[Any, ...]]] = []
        for it in apply:
            hs = self.handlers.handlers_for(it.env.event_type, self.mode)
            batchable = bool(hs) and all(h.batch for h in hs)
            if batchable and runs and runs[-1][1] == hs:
                runs[-1][0].append(it)
            else:
                runs.append(([it], hs if batchable else ()))
        return runs

    def _run_batch(self, conn: Any, run: list[_Item], hs: tuple[Any, ...]) -> None:
        first = run[0].rec
        ctx = HandlerContext(conn=conn, outbox=self.outbox, mode=self.mode,
                             consumer=self.consumer, topic=first.topic,
                             partition=first.partition, offset=first.offset,
                             positions=tuple((i.rec.topic, i.rec.partition, i.rec.offset)
                                             for i in run))
        events = [i.env for i in run]
        with telemetry.consume_batch_span(self.consumer, [(i.rec, i.env) for i in run]):
            for h in hs:
                h.fn(ctx, events)

    def _run_handlers(self, conn: Any, rec: Record, env: Any) -> int:
        """Run the handlers of ``env``; returns 1 if the type has none (counted as unknown)."""
        hs = self.handlers.handlers_for(env.event_type, self.mode)
        if not hs:
            return 0 if self.handlers.knows(env.event_type) else 1
        ctx = HandlerContext(conn=conn, outbox=self.outbox, mode=self.mode,
                             consumer=self.consumer, topic=rec.topic, partition=rec.partition,
                             offset=rec.offset, positions=((rec.topic, rec.partition, rec.offset),))
        with telemetry.consume_span(self.consumer, rec, env):
            for h in hs:
                h.call(ctx, env)
        return 0

    # ------------------------------------------------------------------ held events

    def _drain(self, conn: Any, key: tuple[str, str], guards: dict[tuple[str, str], GuardRow],
               known: set[str], seen: set[str], dead: list[DeadLetter], *, advanced: bool) -> None:
        """Apply held events of ``key`` that are now contiguous, in version order."""
        g = guards[key]
        rows = held_events(conn, self.consumer, key)
        remaining = len(rows)
        for h in rows:
            if h.event_id in known or h.event_id in seen or h.aggregate_version <= g.last_version:
                release_held(conn, self.consumer, h.event_id)
                remaining -= 1
                continue
            if h.aggregate_version != g.last_version + 1:
                break
            rec = held_record(h)
            try:
                env = self.decoder.decode(h.value, published_at=rec.published_at)
            except Exception as e:  # noqa: BLE001
                if self._held_failed(conn, h, e, None, dead):
                    remaining -= 1
                break
            try:
                self._apply_tx(conn, _Item(rec, env), guards, held=h)
            except Exception as e:  # noqa: BLE001 - classified in _held_failed
                if self._held_failed(conn, h, e, env, dead):
                    remaining -= 1  # dead-lettered and released: the gap stays open
                break
            self.stats.drained += 1
            seen.add(h.event_id)
            remaining -= 1
            advanced = True
        if remaining == 0:
            set_state(conn, self.consumer, key, AggregateState.FLOWING)
            g.state = AggregateState.FLOWING
            log.info("%s: %s %s flowing again at v%d", self.consumer, key[0], key[1],
                     g.last_version)
        elif advanced:
            set_state(conn, self.consumer, key, AggregateState.HOLDING,
                      hold_s=self.settings.gap_hold_s)
            g.state = AggregateState.HOLDING

    def _held_failed(self, conn: Any, h: HeldEvent, e: BaseException, env: Any,
                     dead: list[DeadLetter]) -> bool:
        """Count a failed drain of ``h``; dead-letter and release it when poison/exhausted.

        Returns True if the held event was dead-lettered (and released).
        """
        fc = classify(e, conn)
        if fc is FailureClass.INFRA:
            raise e
        policy = self.settings.retry
        attempts = record_held_failure(conn, self.consumer, h.event_id,
                                       f"{type(e).__name__}: {e}", policy.delay(h.attempts + 1))
        self.stats.retries += int(fc is FailureClass.RETRYABLE)
        if fc is FailureClass.POISON or policy.exhausted(attempts):
            now = _now()
            dead.append(self._dead_letter(held_record(h), e, env, attempts,
                                          h.first_failure or now, now, event_id=h.event_id))
            release_held(conn, self.consumer, h.event_id)
            return True
        return False

    def _sweep(self, conn: Any, dead: list[DeadLetter]) -> None:
        for w in waiting_aggregates(conn, self.consumer):
            key = (w.aggregate_type, w.aggregate_id)
            self._guard_cache.pop(key, None)
            if w.first_held is None:
                set_state(conn, self.consumer, key, AggregateState.FLOWING)
                continue
            if w.first_held <= w.last_version + 1:
                if w.first_held_due:
                    guards = {key: GuardRow(w.last_version, w.state)}
                    self._drain(conn, key, guards, set(), set(), dead, advanced=False)
                continue
            if w.state is AggregateState.HOLDING and w.expired:
                first = held_events(conn, self.consumer, key)[0]
                now = _now()
                err = PoisonMessageError(
                    f"{key[0]} {key[1]}: version gap, expected v{w.last_version + 1} but the next"
                    f" event held is v{first.aggregate_version}; aggregate parked after"
                    f" {self.settings.gap_hold_s:g} s", reason="version_gap")
                dl = self._dead_letter(held_record(first), err, None, 1, now, now,
                                       event_id=first.event_id)
                dead.append(dl)
                set_state(conn, self.consumer, key, AggregateState.PARKED)
                self.stats.parked += 1
                log.warning("%s: parked %s %s at v%d (gap before v%d); dead-lettered %s",
                            self.consumer, key[0], key[1], w.last_version,
                            first.aggregate_version, first.event_id)

    # ------------------------------------------------------------------ failures

    def _failed(self, rec: Record, e: BaseException, env: Any, result: BatchResult,
                dead: list[DeadLetter], conn: Any = None) -> None:
        """A message failed: dead-letter it (poison / attempts used up) or cut its partition."""
        fc = classify(e, conn)
        if fc is FailureClass.INFRA:
            raise e
        pos = (rec.topic, rec.partition, rec.offset)
        now = _now()
        a = self._attempts.get(pos)
        if a is None:
            a = self._attempts[pos] = _Attempt(0, now, now)
        a.count += 1
        a.last = now
        policy = self.settings.retry
        if fc is FailureClass.POISON or policy.exhausted(a.count):
            dead.append(self._dead_letter(rec, e, env, a.count, a.first, a.last))
            del self._attempts[pos]
            return
        self.stats.retries += 1
        delay = policy.delay(a.count)
        log.warning("%s: %s[%d]@%d failed (attempt %d/%d, retry in %.2f s): %s: %s",
                    self.consumer, rec.topic, rec.partition, rec.offset, a.count,
                    policy.max_attempts, delay, type(e).__name__, e,
                    extra={"consumer": self.consumer, "attempt": a.count,
                           "event_id": getattr(env, "event_id", None),
                           "correlation_id": getattr(env, "correlation_id", None),
                           "aggregate_id": getattr(env, "aggregate_id", None),
                           "failure_class": fc.name.lower()})
        result.cut(rec.tp, rec.offset, delay)

    def _single_commit_failure(self, conn: Any, rec: Record, e: BaseException) -> BatchResult:
        result = BatchResult(commits={rec.tp: rec.offset + 1})
        dead: list[DeadLetter] = []
        self._failed(rec, e, None, result, dead, conn)
        if dead:
            self._send(dead)
        return result

    def _dead_letter(self, rec: Record, e: BaseException, env: Any, attempts: int,
                     first: datetime, last: datetime, *, event_id: str | None = None) -> DeadLetter:
        reason = reason_of(e)
        return DeadLetter(
            record=rec, error_class=error_class(e), reason=reason, message=str(e),
            attempts=attempts, first_failure=first, last_failure=last,
            correlation_id=getattr(env, "correlation_id", None),
            traceparent=getattr(env, "traceparent", None),
            event_id=event_id or getattr(env, "event_id", None),
            event_type=getattr(env, "event_type", None),
        )

    def _send(self, dead: list[DeadLetter]) -> None:
        if not dead:
            return
        for dl in dead:
            self.dead_letters.send(dl)
            self.stats.dead_lettered += 1
            self.stats.count_reason(dl.reason)
            log.warning("%s: dead-lettered %s[%d]@%d reason=%s attempts=%d: %s", self.consumer,
                        dl.record.topic, dl.record.partition, dl.record.offset, dl.reason,
                        dl.attempts, dl.message[:200],
                        extra={"consumer": self.consumer, "event_id": dl.event_id,
                               "correlation_id": dl.correlation_id, "attempt": dl.attempts,
                               "failure_class": dl.reason})  # JSON log fields (telemetry.logs)
        self.dead_letters.flush()


def held_record(h: HeldEvent) -> Record:
    """The :class:`Record` a held event was stored from."""
    return Record(topic=h.topic, partition=h.partition, offset=h.offset, key=h.key,
                  value=h.value, headers=h.headers, timestamp_ms=h.timestamp_ms)


__all__ = ["Action", "BatchProcessor", "BatchResult", "Decoded", "held_record"]
