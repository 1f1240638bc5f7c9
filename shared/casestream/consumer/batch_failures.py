"""Failed messages of a batch: attempt counting, cuts, dead letters and their delivery.

Mixed into :class:`casestream.consumer.batch.BatchProcessor` (uses its ``consumer``,
``settings``, ``stats``, ``dead_letters`` and ``_attempts`` attributes): ``_failed`` classifies
a failure (``casestream.consumer.failures``) and either dead-letters the message (poison or
attempts used up) or cuts its partition for a retry after a backoff; ``_send`` delivers and
flushes dead letters.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from casestream.consumer.batch_model import BatchResult, _Attempt, _now
from casestream.consumer.failures import FailureClass, classify, error_class, reason_of
from casestream.consumer.records import Record
from casestream.consumer.deadletters import DeadLetter

log = logging.getLogger("casestream.consumer")


class FailureMixin:
    """Failure classification, attempts and dead letters of :class:`BatchProcessor`."""

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
        if fc is FailureClass.POISON or policy.exhausted(a.count, (now - a.first).total_seconds()):
            dead.append(self._dead_letter(rec, e, env, a.count, a.first, a.last))
            del self._attempts[pos]
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
