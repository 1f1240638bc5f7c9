"""Held events (version gaps): draining them when contiguous, and the held/parked sweep.

:class:`HeldEvents` applies the held events of an aggregate that became contiguous, in
version order (``drain``); counts a failed drain in the held row (dead-letters and releases
the event when poison or the retry policy is exhausted); and ``sweep`` parks aggregates whose
hold expired (dead letter ``version_gap``) and drains held events that became due.
"""

from __future__ import annotations

import logging
from typing import Any

from casestream.consumer.batch_failures import FailureHandler
from casestream.consumer.batch_fast import GuardCache
from casestream.consumer.batch_model import _now, decode_record, held_record, item_of
from casestream.consumer.batch_slow import MessageApplier
from casestream.consumer.deadletters import DeadLetter
from casestream.consumer.failures import FailureClass, classify
from casestream.handlers.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    HeldEvent,
    held_events,
    record_held_failure,
    release_held,
    set_state,
    waiting_aggregates,
)
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder
from casestream.errors import PoisonMessageError
from casestream.retry import RetryPolicy

log = logging.getLogger("casestream.consumer")


class HeldEvents:
    """Held-event draining and the held/parked sweep of one consumer.

    Args:
        consumer: inbox consumer name.
        decoder: decodes the stored value of a held event.
        applier: the one-message savepoint (releases the held row with the apply).
        failures: classification and dead letters (attempts of held events are counted in
            their rows, not in memory).
        cache: guard rows cached by the fast path (dropped for swept aggregates).
        stats: counters (``drained``, ``retries``, ``parked``).
        policy: retry bounds and delays of failed drains.
        gap_hold_s: hold window of an aggregate with a gap, seconds.
    """

    def __init__(self, *, consumer: str, decoder: EnvelopeDecoder, applier: MessageApplier,
                 failures: FailureHandler, cache: GuardCache, stats: ConsumerStats,
                 policy: RetryPolicy, gap_hold_s: float) -> None:
        self.consumer = consumer
        self.decoder = decoder
        self.applier = applier
        self.failures = failures
        self.cache = cache
        self.stats = stats
        self.policy = policy
        self.gap_hold_s = gap_hold_s

    def drain(self, conn: Any, key: tuple[str, str], guards: dict[tuple[str, str], GuardRow],
              known: set[str], seen: set[str], dead: list[DeadLetter], *, advanced: bool) -> None:
        """Apply held events of ``key`` that are now contiguous, in version order.

        A held row is released without applying it only when its event is recorded already:
        its id is in ``known`` (inbox rows from before the batch) or its version is at or
        below the guard's last version (an event applied in this batch recorded its version).
        ``seen`` is not evidence: it also holds the events held in this batch (a copy later
        in the batch is a duplicate of the held row); drained event ids are added to it.
        """
        g = guards[key]
        rows = held_events(conn, self.consumer, key)
        remaining = len(rows)
        for h in rows:
            if h.event_id in known or h.aggregate_version <= g.last_version:
                release_held(conn, self.consumer, h.event_id)
                remaining -= 1
                continue
            if h.aggregate_version != g.last_version + 1:
                break
            rec = held_record(h)
            try:
                it = item_of(rec, decode_record(self.decoder, h.value, rec.published_at))
                env = it.env
            except Exception as e:  # noqa: BLE001
                if self._failed(conn, h, e, None, dead):
                    remaining -= 1
                break
            try:
                self.applier.apply(conn, it, guards, held=h)
            except Exception as e:  # noqa: BLE001 - classified in _failed
                if self._failed(conn, h, e, env, dead):
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
            set_state(conn, self.consumer, key, AggregateState.HOLDING, hold_s=self.gap_hold_s)
            g.state = AggregateState.HOLDING

    def _failed(self, conn: Any, h: HeldEvent, e: BaseException, env: Any,
                dead: list[DeadLetter]) -> bool:
        """Count a failed drain of ``h``; dead-letter and release it when poison/exhausted.

        Returns True if the held event was dead-lettered (and released).
        """
        fc = classify(e, conn)
        if fc is FailureClass.INFRA:
            raise e
        policy = self.policy
        attempts = record_held_failure(conn, self.consumer, h.event_id,
                                       f"{type(e).__name__}: {e}", policy.delay(h.attempts + 1))
        self.stats.retries += int(fc is FailureClass.RETRYABLE)
        now = _now()
        elapsed = (now - h.first_failure).total_seconds() if h.first_failure else 0.0
        if fc is FailureClass.POISON or policy.exhausted(attempts, elapsed):
            dead.append(self.failures.dead_letter(held_record(h), e, env, attempts,
                                                  h.first_failure or now, now,
                                                  event_id=h.event_id))
            release_held(conn, self.consumer, h.event_id)
            return True
        return False

    def sweep(self, conn: Any, dead: list[DeadLetter]) -> None:
        """Park aggregates whose hold expired (a ``version_gap`` dead letter each, appended to
        ``dead``) and drain held events that became due; inside the caller's transaction."""
        for w in waiting_aggregates(conn, self.consumer):
            key = (w.aggregate_type, w.aggregate_id)
            self.cache.discard(key)
            if w.first_held is None:
                set_state(conn, self.consumer, key, AggregateState.FLOWING)
                continue
            if w.first_held <= w.last_version + 1:
                if w.first_held_due:
                    guards = {key: GuardRow(w.last_version, w.state)}
                    self.drain(conn, key, guards, set(), set(), dead, advanced=False)
                continue
            if w.state is AggregateState.HOLDING and w.expired:
                first = held_events(conn, self.consumer, key)[0]
                now = _now()
                err = PoisonMessageError(
                    f"{key[0]} {key[1]}: version gap, expected v{w.last_version + 1} but the next"
                    f" event held is v{first.aggregate_version}; aggregate parked after"
                    f" {self.gap_hold_s:g} s", reason="version_gap")
                dead.append(self.failures.dead_letter(held_record(first), err, None, 1, now, now,
                                                      event_id=first.event_id))
                set_state(conn, self.consumer, key, AggregateState.PARKED)
                self.stats.parked += 1
                log.warning("%s: parked %s %s at v%d (gap before v%d); dead-lettered %s",
                            self.consumer, key[0], key[1], w.last_version,
                            first.aggregate_version, first.event_id)
