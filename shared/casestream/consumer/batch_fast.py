"""The fast path: a whole batch in one pipelined transaction (see ``casestream.consumer.batch``).

Mixed into :class:`casestream.consumer.batch.BatchProcessor` (uses its attributes, the verdict
and handler steps of ``batch_dispatch``): round trip 1 claims the inbox rows and reads the guard
rows (or takes them from the processor's guard cache), every record is decided in memory, round
trip 2 advances the guard rows and runs the handlers; :class:`_Ineligible` or any failure rolls
back and the caller redoes the batch on the slow path (``batch_slow``). Also keeps the cache of
guard rows committed as flowing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from casestream.consumer.batch_model import Action, _Ineligible, _Item
from casestream.consumer.failures import FailureClass, classify
from casestream.consumer.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    advance_batch,
    check_advanced,
    claim_inbox,
    query_guards,
    read_claimed,
    read_guards,
)

log = logging.getLogger("casestream.consumer")


class FastPathMixin:
    """Pipelined one-transaction batch application and the guard cache of :class:`BatchProcessor`."""

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
