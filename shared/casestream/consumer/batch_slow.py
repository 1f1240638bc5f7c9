"""The slow path: one transaction, a savepoint per message (see ``casestream.consumer.batch``).

Mixed into :class:`casestream.consumer.batch.BatchProcessor` (uses its attributes and the steps
of ``batch_dispatch``, ``batch_fast``, ``batch_held`` and ``batch_failures``): each message's
inbox row, guard row and handlers are applied in its own savepoint so one failure rolls back
only that message; a retryable failure cuts its partition; events behind a version gap are held
(``casestream.consumer.inbox``), and applying the missing version drains them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from casestream.consumer.batch_model import Action, BatchResult, _Item
from casestream.consumer.deadletters import DeadLetter
from casestream.errors import PoisonMessageError
from casestream.consumer.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    HeldEvent,
    advance_guards,
    hold,
    insert_inbox,
    known_event_ids,
    load_guards,
    release_held,
    set_last_version,
)

log = logging.getLogger("casestream.consumer")


class SlowPathMixin:
    """Per-message savepoint application of :class:`BatchProcessor`."""

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
