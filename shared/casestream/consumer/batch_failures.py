"""Failed messages of a batch: attempt counts, cuts, dead letters and their delivery.

:class:`FailureHandler` owns the in-memory attempt counts per (topic, partition, offset).
``failed`` classifies a failure (``casestream.consumer.failures``) and either dead-letters the
message (poison, or the retry policy exhausted) or cuts its partition for a retry after the
policy's delay; ``send`` delivers and flushes dead letters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from casestream.consumer.batch_model import TP, BatchResult, _Attempt, _Item, _now
from casestream.consumer.deadletters import DeadLetter, DeadLetterSink
from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.consumer.records import ConsumerStats, Record
from casestream.retry import RetryPolicy

log = logging.getLogger("casestream.consumer")


class FailureHandler:
    """Failure classification, attempt counts and dead-letter delivery of one consumer.

    Args:
        consumer: inbox consumer name (for logs).
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
        self.attempts: dict[tuple[str, int, int], _Attempt] = {}

    # ------------------------------------------------------------------ attempt counts

    def retrying(self, items: Iterable[_Item]) -> bool:
        """True if a message of ``items`` has failed before (is being retried)."""
        attempts = self.attempts
        return bool(attempts) and any(
            (it.rec.topic, it.rec.partition, it.rec.offset) in attempts for it in items)

    def succeeded(self, items: Iterable[_Item]) -> None:
        """Drop the attempt counts of ``items``: they were applied."""
        if self.attempts:
            for it in items:
                self.attempts.pop((it.rec.topic, it.rec.partition, it.rec.offset), None)

    def count(self, rec: Record) -> int:
        """Failed attempts recorded so far for ``rec`` (0 if none)."""
        a = self.attempts.get((rec.topic, rec.partition, rec.offset))
        return a.count if a else 0

    def forget(self, tps: Sequence[TP]) -> None:
        """Drop the attempt counts of the partitions ``tps``."""
        gone = set(tps)
        for pos in [p for p in self.attempts if (p[0], p[1]) in gone]:
            del self.attempts[pos]

    # ------------------------------------------------------------------ failures

    def failed(self, rec: Record, e: BaseException, env: Any, result: BatchResult,
               dead: list[DeadLetter], conn: Any = None) -> None:
        """A message failed: dead-letter it (poison / policy exhausted) or cut its partition.

        Raises:
            ``e`` itself when it is an infrastructure failure (the batch fails as a whole).
        """
        fc = classify(e, conn)
        if fc is FailureClass.INFRA:
            raise e
        pos = (rec.topic, rec.partition, rec.offset)
        now = _now()
        a = self.attempts.get(pos)
        if a is None:
            a = self.attempts[pos] = _Attempt(0, now, now)
        a.count += 1
        a.last = now
        policy = self.policy
        if fc is FailureClass.POISON or policy.exhausted(a.count, (now - a.first).total_seconds()):
            dead.append(self.dead_letter(rec, e, env, a.count, a.first, a.last))
            del self.attempts[pos]
            return
        self.stats.retries += 1
        delay = policy.delay(a.count)
        log.warning("%s: %s[%d]@%d failed (attempt %d/%s, retry in %.2f s): %s: %s",
                    self.consumer, rec.topic, rec.partition, rec.offset, a.count,
                    policy.max_attempts, delay, type(e).__name__, e,
                    extra={"consumer": self.consumer, "attempt": a.count,
                           "event_id": getattr(env, "event_id", None),
                           "correlation_id": getattr(env, "correlation_id", None),
                           "aggregate_id": getattr(env, "aggregate_id", None),
                           "failure_class": fc.name.lower()})
        result.cut(rec.tp, rec.offset, delay)

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
