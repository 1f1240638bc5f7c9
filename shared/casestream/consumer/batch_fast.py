"""The fast path: a whole batch in one pipelined transaction, and the guard-row cache.

:class:`FastPath` runs round trip 1 (claim the inbox rows, read the guard rows not in the
:class:`GuardCache`, look for ``consumer_retry`` rows of the batch's events: one sends it to
the savepoint path), decides every record in memory, then round trip 2 (advance the guard
rows, run the handlers) and COMMIT. A batch that needs per-message handling, or any failure,
rolls back and the caller redoes it on the savepoint path (``batch_slow``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_failures import FailureHandler
from casestream.consumer.batch_model import Action, _Ineligible, Item
from casestream.consumer.failures import FailureClass, classify
from casestream.handlers.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    advance_batch,
    check_advanced,
    claim_inbox,
    payload_hash,
    query_guards,
    read_claimed,
    read_guards,
    recorded_hashes,
)
from casestream.consumer.records import ConsumerStats
from casestream.consumer.retries import query_retries, read_retries

log = logging.getLogger("casestream.consumer")


class GuardCache:
    """aggregate -> last version of the guard rows this consumer committed as flowing.

    A stale entry is harmless: the inbox claim decides duplicates and the guard upsert is
    conditional, so it only sends a batch to the savepoint path.

    Args:
        limit: entries kept at most (0 = off); past it the cache is emptied and refilled.
    """

    __slots__ = ("limit", "rows")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rows: dict[tuple[str, str], int] = {}

    def remember(self, guards: dict[tuple[str, str], GuardRow]) -> None:
        """Keep the rows of ``guards`` that are flowing (a committed batch's guard rows)."""
        if self.limit <= 0:
            return
        rows = self.rows
        if len(rows) + len(guards) > self.limit:
            rows.clear()
        for key, g in guards.items():
            if g.state is AggregateState.FLOWING:
                rows[key] = g.last_version

    def drop(self, items: Sequence[Item]) -> None:
        """Forget the aggregates of ``items``."""
        if self.rows:
            for it in items:
                self.rows.pop(it.key, None)

    def discard(self, key: tuple[str, str]) -> None:
        """Forget aggregate ``key``."""
        self.rows.pop(key, None)

    def clear(self) -> None:
        self.rows.clear()


class FastPath:
    """Pipelined one-transaction application of a batch.

    Args:
        consumer: inbox consumer name.
        dispatch: verdicts and handler calls.
        failures: attempt counts (a batch with a message being retried is not tried here).
        cache: guard rows known from earlier batches.
        stats: counters to update after a commit.
        pipeline: send the handlers' statements in psycopg pipeline mode.
        concurrency: most coroutine handler calls awaited at once (different aggregates;
            1: one after the other).
    """

    def __init__(self, *, consumer: str, dispatch: Dispatcher, failures: FailureHandler,
                 cache: GuardCache, stats: ConsumerStats, pipeline: bool,
                 concurrency: int = 1) -> None:
        self.consumer = consumer
        self.dispatch = dispatch
        self.failures = failures
        self.cache = cache
        self.stats = stats
        self.pipeline = pipeline
        self.concurrency = concurrency
        #: (id of the record whose per-event handler raised, the exception) of the last
        #: ``try_apply``: that call was the message's attempt, the slow path must not repeat it.
        self.handler_failure: tuple[int, BaseException] | None = None

    def try_apply(self, conn: Any, items: list[Item]) -> bool:
        """The whole batch in one pipelined transaction; False if not eligible or it failed
        (then rolled back: the caller redoes the batch with a savepoint per message).

        Raises:
            the failure itself when it is an infrastructure failure.
        """
        self.handler_failure = None
        if self.failures.retrying(items):
            return False  # a message being retried: go straight to per-message savepoints
        counters: dict[str, Any] = {}
        try:
            if self.pipeline:
                with conn.pipeline() as pipeline, conn.transaction():
                    self._apply(conn, pipeline, items, counters)
            else:
                with conn.transaction():
                    self._apply(conn, None, items, counters)
        except _Ineligible:
            self.cache.drop(items)
            return False
        except Exception as e:
            self.cache.drop(items)
            if classify(e, conn) is FailureClass.INFRA:
                raise
            log.debug("%s: fast path failed (%s: %s); redoing batch with savepoints",
                      self.consumer, type(e).__name__, e)
            return False
        self.cache.remember(counters["guards"])
        st = self.stats
        st.applied += counters["applied"]
        st.duplicates += counters["dup"]
        st.stale += counters["stale"]
        st.unknown_type += counters["unknown"]
        return True

    def _reused(self, conn: Any, items: list[Item], known: set[str]) -> bool:
        """True if an event id repeated in ``items`` or recorded before (``known``) comes with
        other content (:func:`~casestream.consumer.inbox.payload_hash`)."""
        first: dict[str, str] = {}
        for it in items:
            h = payload_hash(it.env)
            if first.setdefault(it.env.event_id, h) != h:
                return True
        stored = recorded_hashes(conn, self.consumer, list(known)) if known else {}
        return any(h is not None and h != first[i] for i, h in stored.items())

    def _apply(self, conn: Any, pipeline: Any, items: list[Item], counters: dict[str, Any]) -> None:
        """Round trip 1: inbox + guard reads. Round trip 2: inbox/guard writes (one statement)
        and the handlers' statements, pipelined (``pipeline`` None: not pipelined). Then COMMIT.
        Raises _Ineligible to bail out."""
        keys = {it.key for it in items}
        cache = self.cache.rows
        start = {k: cache[k] for k in keys if k in cache} if cache else {}  # last versions
        missing = keys - start.keys() if start else keys
        claim_cur = claim_inbox(conn, self.consumer, [it.env for it in items])
        guards_cur = query_guards(conn, self.consumer, missing) if missing else None
        retries_cur = query_retries(conn, self.consumer, [it.env.event_id for it in items])
        claimed = read_claimed(claim_cur)
        if read_retries(retries_cur):
            raise _Ineligible  # failed before (maybe on another member): owed backoff, count
        known = {it.env.event_id for it in items} - claimed  # recorded before this batch
        if len(claimed) < len(items) and self._reused(conn, items, known):
            raise _Ineligible  # a reused event id: the savepoint path dead-letters it
        flowing = AggregateState.FLOWING
        guards = {k: GuardRow(v, flowing) for k, v in start.items()}
        if guards_cur is not None:
            read = read_guards(guards_cur)
            guards.update(read)  # planned below in place: ``start`` keeps their versions
            start.update((k, g.last_version) for k, g in read.items())
        seen: set[str] = set()
        apply: list[Item] = []
        dup = stale = 0
        action_of = self.dispatch.action
        side_effects = self.dispatch.item_has_side_effects
        for it in items:
            action = action_of(it, known, seen, guards)
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
            if side_effects(it):
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
                elif g.last_version != s:
                    updates.append((key[0], key[1], s, g.last_version))
            recorded = advance_batch(conn, self.consumer, updates)
            # Pipeline mode: handler statements are sent without waiting for each result;
            # errors surface at the next sync. A psycopg error may thus show up in a later
            # handler, so only non-database exceptions are attributed to an item.
            unknown = self._handlers(conn, apply)
            if pipeline is not None:
                pipeline.sync()
            check_advanced(recorded)
        counters.update(applied=len(apply), dup=dup, stale=stale, unknown=unknown, guards=guards)

    def _handlers(self, conn: Any, apply: list[Item]) -> int:
        """Run the handlers of ``apply`` in order; returns how many events had none.

        With ``concurrency`` > 1, consecutive events taken by coroutine handlers form a wave
        awaited concurrently (:meth:`_wave`); a batch handler or a plain one ends the wave."""
        unknown = 0
        dispatch = self.dispatch
        wave: list[Item] = []
        for run, hs in dispatch.runs(apply):
            if len(run) > 1 or (hs and hs[0].batch):
                if wave:
                    unknown += self._wave(conn, wave)
                    wave = []
                dispatch.run_batch(conn, run, hs)
                continue
            it = run[0]
            if self.concurrency > 1 and dispatch.awaits(it):
                wave.append(it)
                continue
            if wave:
                unknown += self._wave(conn, wave)
                wave = []
            try:
                unknown += dispatch.run_handlers(conn, it.rec, it.env)
            except psycopg.Error:
                raise
            except Exception as e:
                self.handler_failure = (id(it.rec), e)
                raise
        if wave:
            unknown += self._wave(conn, wave)
        return unknown

    def _wave(self, conn: Any, wave: list[Item]) -> int:
        """Await the handlers of ``wave`` with up to ``concurrency`` calls at once (on a shared
        handler loop: by its callers, which every unit shares): one chain per aggregate,
        each chain's events in order. The first failure stops every chain
        before its next event and is raised once the calls under way have ended (the
        transaction then rolls back)."""
        chains: dict[tuple[str, str], list[Item]] = {}
        for it in wave:
            chains.setdefault(it.key, []).append(it)
        unknown, failed = self.dispatch.run_chains(conn, list(chains.values()), self.concurrency)
        if failed:
            it, e = failed[0]
            if not isinstance(e, psycopg.Error):
                self.handler_failure = (id(it.rec), e)
            raise e
        return unknown
