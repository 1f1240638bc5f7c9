"""Failed messages of a batch: attempt counts, cuts, dead letters and their delivery.

:class:`FailureHandler` keeps the attempt counts and next-attempt times durable in
``consumer_retry`` (``casestream.consumer.retries``), written in the batch's transaction, so
they survive rebalances and restarts. ``load`` reads the rows of a batch's messages;
``owed`` tells whether a message must still wait (a cut without an attempt) or was already
dead-lettered; ``failed`` classifies a failure (``casestream.consumer.failures``) and either
dead-letters the message (poison, or the retry policy exhausted) or cuts its partition for a
retry after the policy's delay; ``send`` delivers and flushes dead letters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from casestream.consumer.batch_model import TP, BatchResult, Item, _now
from casestream.consumer.deadletters import DeadLetter, DeadLetterSink
from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.consumer.records import ConsumerStats, Record
from casestream.consumer.retries import (
    RetryState,
    clear_retries,
    load_retries,
    mark_dead_lettered,
    record_failure,
    retry_key,
    schedule,
)
from casestream.retry import RetryPolicy

log = logging.getLogger("casestream.consumer")


class FailureHandler:
    """Failure classification, durable attempt counts and dead-letter delivery of one consumer.

    Args:
        consumer: inbox consumer name (the key of its ``consumer_retry`` rows, and for logs).
        policy: retry bounds and delays of retryable failures.
        stats: counters to update (``retries``, ``dead_lettered``, reasons).
        dead_letters: where dead letters go.
    """

    def __init__(self, *, consumer: str, policy: RetryPolicy, stats: ConsumerStats,
                 dead_letters: DeadLetterSink) -> None:
        self.consumer = consumer
        self.policy = policy
        self.stats = stats
        self.dead_letters = dead_letters
        #: retry rows of the batch being applied (key -> state), from :meth:`load`
        self.states: dict[str, RetryState] = {}
        #: keys this member recorded a failure for and has not seen succeed: a batch holding
        #: one goes straight to the savepoint path (the fast path would find the row anyway)
        self.hints: set[str] = set()

    # ------------------------------------------------------------------ attempt counts

    def retrying(self, items: Iterable[Item]) -> bool:
        """True if this member knows a message of ``items`` has failed before."""
        hints = self.hints
        return bool(hints) and any(retry_key(it.rec, it.env) in hints for it in items)

    def load(self, conn: Any, keys: Sequence[str]) -> dict[str, RetryState]:
        """Read the retry rows of ``keys`` for the batch being applied (one round trip)."""
        self.states = load_retries(conn, self.consumer, keys)
        return self.states

    def owed(self, rec: Record, env: Any, result: BatchResult, dead: list[DeadLetter],
             conn: Any) -> bool:
        """Handle ``rec`` without an attempt if its row says so; True if it was handled.

        A row still in backoff cuts the partition for the rest of the backoff (database
        clock); a dead-lettered row of the same delivery (a crash came between the commit and
        the dead letter's delivery) dead-letters it again with the recorded count.
        """
        st = self.states.get(retry_key(rec, env))
        if st is None:
            return False
        if st.dead_lettered:
            if not st.same_delivery(rec):
                return False  # re-driven: a new series of attempts
            dead.append(DeadLetter(
                record=rec, error_class=st.error_class, reason=st.reason, message=st.message,
                attempts=st.attempts, first_failure=st.first_failure,
                last_failure=st.last_failure, correlation_id=getattr(env, "correlation_id", None),
                traceparent=getattr(env, "traceparent", None),
                event_id=getattr(env, "event_id", None), event_type=getattr(env, "event_type", None)))
            return True
        if st.wait_s <= 0:
            return False
        log.info("%s: %s[%d]@%d waits %.2f s more (attempt %d failed)", self.consumer, rec.topic,
                 rec.partition, rec.offset, st.wait_s, st.attempts)
        result.cut(rec.tp, rec.offset, st.wait_s)
        return True

    def succeeded(self, conn: Any, items: Iterable[Item]) -> None:
        """Drop the retry rows of ``items``: they were applied (inside the batch transaction)."""
        if not self.states:
            return
        keys = [k for k in (retry_key(it.rec, it.env) for it in items) if k in self.states]
        if keys:
            clear_retries(conn, self.consumer, keys)
            for k in keys:
                self.states.pop(k, None)
                self.hints.discard(k)

    def count(self, conn: Any, rec: Record, env: Any = None) -> int:
        """Failed attempts recorded so far for ``rec`` (0 if none)."""
        st = load_retries(conn, self.consumer, [retry_key(rec, env)]).get(retry_key(rec, env))
        return st.attempts if st else 0

    def forget(self, tps: Sequence[TP]) -> None:
        """Partitions ``tps`` were revoked: their retry state stays in the database for the
        next owner; only this member's hints go."""
        self.hints.clear()

    # ------------------------------------------------------------------ failures

    def failed(self, rec: Record, e: BaseException, env: Any, result: BatchResult,
               dead: list[DeadLetter], conn: Any) -> None:
        """A message failed: dead-letter it (poison / policy exhausted) or cut its partition.

        The attempt is counted in ``consumer_retry`` through ``conn`` (in the caller's
        transaction when one is open).

        Raises:
            ``e`` itself when it is an infrastructure failure (the batch fails as a whole).
        """
        fc = classify(e, conn)
        if fc is FailureClass.INFRA:
            raise e
        key = retry_key(rec, env)
        ecls, reason, message = error_class(e), reason_of(e), str(e)
        policy = self.policy
        if fc is FailureClass.POISON:
            prior = self.states.get(key)
            now = _now()
            if prior is None or prior.dead_lettered:
                dead.append(self.dead_letter(rec, e, env, 1, now, now))  # no row needed
            else:  # failed retryably before: its count goes on
                self._dead(conn, key, rec, e, env, prior.attempts + 1, prior.first_failure,
                           now, dead)
            return
        count, first, last = record_failure(conn, self.consumer, key, rec, error_class=ecls,
                                            reason=reason, message=message)
        if policy.exhausted(count, (last - first).total_seconds()):
            self._dead(conn, key, rec, e, env, count, first, last, dead)
            return
        delay = policy.delay(count)
        schedule(conn, self.consumer, key, delay)
        self.hints.add(key)
        self.stats.retries += 1
        log.warning("%s: %s[%d]@%d failed (attempt %d/%s, retry in %.2f s): %s: %s",
                    self.consumer, rec.topic, rec.partition, rec.offset, count,
                    policy.max_attempts, delay, type(e).__name__, e,
                    extra={"consumer": self.consumer, "attempt": count,
                           "event_id": getattr(env, "event_id", None),
                           "correlation_id": getattr(env, "correlation_id", None),
                           "aggregate_id": getattr(env, "aggregate_id", None),
                           "failure_class": fc.name.lower()})
        result.cut(rec.tp, rec.offset, delay)

    def _dead(self, conn: Any, key: str, rec: Record, e: BaseException, env: Any, count: int,
              first: datetime, last: datetime, dead: list[DeadLetter]) -> None:
        dl = self.dead_letter(rec, e, env, count, first, last)
        mark_dead_lettered(conn, self.consumer, key, rec, attempts=count,
                           error_class=dl.error_class, reason=dl.reason, message=dl.message)
        self.hints.discard(key)
        self.states.pop(key, None)
        dead.append(dl)

    def single_commit_failure(self, conn: Any, rec: Record, e: BaseException) -> BatchResult:
        """The result of a one-message batch whose transaction could not commit: the failure
        is that message's own."""
        result = BatchResult(commits={rec.tp: rec.offset + 1})
        dead: list[DeadLetter] = []
        self.failed(rec, e, None, result, dead, conn)
        if dead:
            self.send(dead)
        return result

    def dead_letter(self, rec: Record, e: BaseException, env: Any, attempts: int,
                    first: datetime, last: datetime, *, event_id: str | None = None) -> DeadLetter:
        """The dead letter of ``rec`` failed with ``e`` (``env``: its envelope, if decoded)."""
        return DeadLetter(
            record=rec, error_class=error_class(e), reason=reason_of(e), message=str(e),
            attempts=attempts, first_failure=first, last_failure=last,
            correlation_id=getattr(env, "correlation_id", None),
            traceparent=getattr(env, "traceparent", None),
            event_id=event_id or getattr(env, "event_id", None),
            event_type=getattr(env, "event_type", None),
        )

    def send(self, dead: list[DeadLetter]) -> None:
        """Deliver ``dead`` and wait for the deliveries (raises ``DeadLetterError``)."""
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
