"""Held events (version gaps): draining them when contiguous, and the held/parked sweep.

Mixed into :class:`casestream.consumer.batch.BatchProcessor` (uses its attributes, ``_apply_tx``
of ``batch_slow`` and ``_dead_letter`` of ``batch_failures``): ``_drain`` applies the held events
of an aggregate that became contiguous, in version order; ``_held_failed`` counts a failed drain
(dead-letters and releases the event when poison or exhausted); ``_sweep`` parks aggregates whose
hold expired (dead letter ``version_gap``) and drains held events that became due.
"""

from __future__ import annotations

import logging
from typing import Any

from casestream.consumer.batch_model import _Item, _now, held_record
from casestream.consumer.failures import FailureClass, classify
from casestream.consumer.deadletters import DeadLetter
from casestream.errors import PoisonMessageError
from casestream.consumer.guard import AggregateState
from casestream.consumer.inbox import (
    GuardRow,
    HeldEvent,
    held_events,
    record_held_failure,
    release_held,
    set_state,
    waiting_aggregates,
)

log = logging.getLogger("casestream.consumer")


class HeldEventsMixin:
    """Held-event draining and the held/parked sweep of :class:`BatchProcessor`."""

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
        now = _now()
        elapsed = (now - h.first_failure).total_seconds() if h.first_failure else 0.0
        if fc is FailureClass.POISON or policy.exhausted(attempts, elapsed):
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
