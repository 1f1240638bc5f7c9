"""The savepoint path: one transaction, a savepoint per message.

:class:`MessageApplier` applies one message in its own savepoint (inbox row, guard row,
handlers, and the release of its held row when it was held). :class:`SavepointPath` takes a
batch message by message through it, so one failure rolls back only that message; a
retryable failure cuts its partition; events behind a version gap are held
(``casestream.consumer.inbox``), and applying the missing version drains them
(``batch_held``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_failures import FailureHandler
from casestream.consumer.batch_fast import GuardCache
from casestream.consumer.batch_model import Action, BatchResult, Item
from casestream.consumer.deadletters import DeadLetter
from casestream.handlers.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    HeldEvent,
    advance_guards,
    hold,
    insert_inbox,
    load_guards,
    payload_hash,
    recorded_hashes,
    release_held,
    set_last_version,
)
from casestream.consumer.records import ConsumerStats
from casestream.errors import PoisonMessageError


class HeldDrain(Protocol):
    """The held events of a consumer as the slow path uses them
    (``casestream.consumer.batch_held.HeldEvents``)."""

    def drain(self, conn: Any, key: tuple[str, str], guards: dict[tuple[str, str], GuardRow],
              known: set[str], seen: set[str], dead: list[DeadLetter], *, advanced: bool) -> None: ...


log = logging.getLogger("casestream.consumer")


class MessageApplier:
    """Applies one message in a savepoint and updates the batch's guard copy and counters.

    Args:
        consumer: inbox consumer name.
        dispatch: handler calls.
        stats: counters (``applied``, ``unknown_type``, ``accepted_gaps``).
    """

    def __init__(self, *, consumer: str, dispatch: Dispatcher, stats: ConsumerStats) -> None:
        self.consumer = consumer
        self.dispatch = dispatch
        self.stats = stats

    def apply(self, conn: Any, it: Item, guards: dict[tuple[str, str], GuardRow], *,
              accept_gap: bool = False, held: HeldEvent | None = None) -> None:
        """Savepoint { inbox row, guard row, handlers[, release held row] }; raises on failure.

        ``accept_gap`` first records ``version - 1`` as the aggregate's last version (a
        re-driven event closing a gap). The in-memory guard copy and the counters change only
        after the savepoint is released.
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
            unknown = self.dispatch.run_item(conn, it)
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


class SavepointPath:
    """Per-message savepoint application of a batch (inside the caller's transaction).

    Args:
        consumer: inbox consumer name.
        dispatch: verdicts.
        applier: the one-message savepoint.
        held: holding's counterpart: drains an aggregate's held events once contiguous.
        failures: classification, attempt counts, dead letters.
        cache: guard rows cached by the fast path (dropped for the batch's aggregates).
        stats: counters.
        max_batch_s: messages not reached after this many seconds are cut (retried at once).
        gap_hold_s: how long an aggregate with a gap holds its events before it is parked.
    """

    def __init__(self, *, consumer: str, dispatch: Dispatcher, applier: MessageApplier,
                 held: HeldDrain, failures: FailureHandler, cache: GuardCache,
                 stats: ConsumerStats, max_batch_s: float, gap_hold_s: float) -> None:
        self.consumer = consumer
        self.dispatch = dispatch
        self.applier = applier
        self.held = held
        self.failures = failures
        self.cache = cache
        self.stats = stats
        self.max_batch_s = max_batch_s
        self.gap_hold_s = gap_hold_s

    def apply(self, conn: Any, items: list[Item], result: BatchResult, dead: list[DeadLetter],
              t0: float, fast_failure: tuple[int, BaseException] | None = None) -> None:
        """Apply ``items`` (the batch started at monotonic ``t0``) message by message.

        ``fast_failure``: (id of a record, exception) whose handler already failed on the fast
        path — that call counts as the record's attempt, its handler is not called again.
        """
        self.cache.drop(items)
        recorded = recorded_hashes(conn, self.consumer, [it.env.event_id for it in items])
        known = set(recorded)
        guards = load_guards(conn, self.consumer, {it.key for it in items})
        failures = self.failures
        retries = failures.load(conn, [it.env.event_id for it in items])
        seen: set[str] = set()
        failed = failures.failed
        for it in items:
            rec = it.rec
            if rec.tp in result.rewinds:
                continue
            if time.monotonic() - t0 > self.max_batch_s:
                result.cut(rec.tp, rec.offset, 0.0)
                continue
            if retries and failures.owed(rec, it.env, result, dead, conn):
                continue
            try:
                action = self.dispatch.action(it, known, seen, guards)
            except PoisonMessageError as e:
                failed(rec, e, it.env, result, dead, conn)
                continue
            if action is Action.DUPLICATE:
                h = payload_hash(it.env)
                if recorded.setdefault(it.env.event_id, h) not in (None, h):
                    self.stats.reused_ids += 1
                    log.error("%s: event id %s reused by another message (%s %s v%d): dead-lettered",
                              self.consumer, it.env.event_id, it.env.aggregate_type,
                              it.env.aggregate_id, it.env.aggregate_version)
                    failed(rec, PoisonMessageError(
                        f"event id {it.env.event_id} already recorded with other content "
                        "(tenant, type, aggregate, version or payload): a different message "
                        "reusing the id, not a redelivery", reason="reused_event_id"),
                        it.env, result, dead, conn)
                    continue
                self.stats.duplicates += 1
                failures.succeeded(conn, (it,))
            elif action is Action.STALE:
                self.stats.stale += 1
                failures.succeeded(conn, (it,))
            elif action is Action.UNKNOWN_STRICT:
                failed(rec, PoisonMessageError(
                    f"no handler for event type {it.env.event_type!r} (strict mode)",
                    reason="unknown_event_type"), it.env, result, dead, conn)
            elif action is Action.HOLD:
                self._hold(conn, it, guards, seen, result, dead)
            elif fast_failure is not None and fast_failure[0] == id(rec):
                failed(rec, fast_failure[1], it.env, result, dead, conn)
                fast_failure = None
            elif self._apply_one(conn, it, guards, result, dead,
                                 accept_gap=action is Action.ACCEPT_GAP):
                seen.add(it.env.event_id)
                recorded.setdefault(it.env.event_id, payload_hash(it.env))
                if guards[it.key].state is not AggregateState.FLOWING:
                    self.held.drain(conn, it.key, guards, known, seen, dead, advanced=True)

    def _hold(self, conn: Any, it: Item, guards: dict[tuple[str, str], GuardRow],
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
                           hold_s=self.gap_hold_s)
        except Exception as e:  # noqa: BLE001
            self.failures.failed(rec, e, env, result, dead, conn)
            return
        if g is None:
            guards[it.key] = GuardRow(base, AggregateState.HOLDING)
        elif g.state is AggregateState.FLOWING:
            g.state = AggregateState.HOLDING
        seen.add(env.event_id)  # a later copy in this batch is a duplicate of the held row
        if new:
            self.stats.held += 1
            log.info("%s: %s %s v%d held behind a gap (last recorded v%d)", self.consumer,
                     env.aggregate_type, env.aggregate_id, env.aggregate_version, base)

    def _apply_one(self, conn: Any, it: Item, guards: dict[tuple[str, str], GuardRow],
                   result: BatchResult, dead: list[DeadLetter], *, accept_gap: bool) -> bool:
        """Apply one live record in its own savepoint; on failure classify it. True if applied."""
        try:
            self.applier.apply(conn, it, guards, accept_gap=accept_gap)
        except Exception as e:  # noqa: BLE001 - classified by the failure handler
            self.failures.failed(it.rec, e, it.env, result, dead, conn)
            return False
        self.failures.succeeded(conn, (it,))
        return True
