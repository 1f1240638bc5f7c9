"""One claimed batch on its way to Kafka: produced rows, their delivery reports, their outcomes.

An :class:`InFlightBatch` is created from the rows of one claim, handed to the producer
(:meth:`InFlightBatch.produce`), and is *open* until every delivery report is in
(:attr:`InFlightBatch.done`). :meth:`InFlightBatch.outcomes` then sorts its rows into
delivered / retry / failed for ``store.mark_outcomes``. While a batch is open, its rows
(``seqs``) and its aggregates (``aggregate_ids``) are excluded from later claims, so a
second batch may be claimed and produced without ever carrying a later event of an
aggregate whose earlier event is still awaiting its report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from casestream import telemetry
from casestream.outbox.writer import headers_for
from casestream.outbox.relay import store
from casestream.outbox.relay.classify import classify
from casestream.retry import RetryPolicy

__all__ = ["InFlightBatch", "Outcomes"]

log = logging.getLogger("casestream.relay")

_PENDING = object()


@dataclass(slots=True)
class Outcomes:
    """What one settled batch records (``store.mark_outcomes``) and counts.

    ``delivered``: confirmed rows; ``retry``: ``(id, delay_s, reason)``; ``failed``:
    ``(id, reason)``; ``errors``: failed delivery reports or synchronous produce errors
    (rows purged before sending are not errors); ``breaches``: aggregates with a later row
    delivered after an earlier one failed (librdkafka message timeout).
    """

    delivered: list[store.Delivered] = field(default_factory=list)
    retry: list[tuple[str, float, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0
    breaches: set[tuple[str, str]] = field(default_factory=set)


class InFlightBatch:
    """The rows of one claim, produced in ``seq`` order; one result slot per row.

    Args:
        rows: claimed rows in ``seq`` order.
        full: the claim returned ``batch_size`` rows (a backlog: the relay awaits this
            batch before claiming again rather than overlapping).
    """

    def __init__(self, rows: list[store.OutboxRow], *, full: bool) -> None:
        self.rows = rows
        self.full = full
        self.seqs = [r.seq for r in rows]
        self.aggregate_ids = {r.aggregateid for r in rows}
        self._results: list[Any] = [_PENDING] * len(rows)
        self._spans: list[Any] = [None] * len(rows)
        self._outstanding = 0
        self._purged = False
        self.started = time.monotonic()
        self.published = 0  # rows confirmed, set when the batch is settled

    @property
    def done(self) -> bool:
        """True when no delivery report is outstanding."""
        return self._outstanding == 0

    def produce(self, producer: Producer, relay: str, topic_prefix: str, buffer_wait_s: float) -> None:
        """Hand every row to ``producer`` (topic = prefix + aggregatetype, key = aggregateid).

        A row whose ``produce`` fails synchronously (e.g. ``MSG_SIZE_TOO_LARGE`` against
        ``message.max.bytes``) gets that error as its result and blocks its aggregate's
        later rows in this batch, which stay pending untouched. A full local queue
        (``BufferError``, ``queue.buffering.max.messages``) is served by
        ``producer.poll(buffer_wait_s)`` and the row retried.
        """
        blocked: set[tuple[str, str]] = set()
        for i, row in enumerate(self.rows):
            agg = (row.aggregatetype, row.aggregateid)
            if agg in blocked or self._purged:
                continue
            topic = topic_prefix + row.aggregatetype
            self._spans[i] = span = telemetry.publish_span(relay, topic, row)
            headers = headers_for(row.id, row.type, row.event_version, span.traceparent,
                                  row.correlation_id)
            while True:
                try:
                    producer.produce(topic, value=row.payload, key=row.aggregateid.encode(),
                                     headers=headers, on_delivery=self._report(producer, i))
                    self._outstanding += 1
                    break
                except BufferError:
                    producer.poll(buffer_wait_s)
                except KafkaException as e:
                    self._results[i] = e.args[0]
                    span.end(e.args[0])
                    blocked.add(agg)
                    break

    def _report(self, producer: Producer, i: int) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            self._outstanding -= 1
            self._spans[i].end(err)
            if err is None:
                self._results[i] = store.Delivered(self.rows[i].id, msg.timestamp()[1],
                                                   msg.partition(), msg.offset())
                return
            self._results[i] = err
            if not self._purged and err.code() == KafkaError._MSG_TIMED_OUT:
                # Keep the rest of the queue from filling the gap this message leaves.
                self._purged = True
                try:
                    producer.purge(in_queue=True, in_flight=False, blocking=False)
                except KafkaException:
                    pass
        return on_delivery

    def outcomes(self, policy: RetryPolicy, relay: str) -> Outcomes:
        """Sort the rows by their result (call when :attr:`done`).

        Transient errors (``casestream.outbox.relay.classify``) are retried after
        ``policy.delay(attempts)`` until ``policy.exhausted``; the rest are failed with
        the reason. Rows never sent (skipped, or ``_PURGE_QUEUE``) are left pending.
        """
        out = Outcomes()
        failed_aggs: set[tuple[str, str]] = set()
        for row, res in zip(self.rows, self._results):
            agg = (row.aggregatetype, row.aggregateid)
            if res is _PENDING:
                continue
            if isinstance(res, store.Delivered):
                if agg in failed_aggs:
                    out.breaches.add(agg)
                out.delivered.append(res)
                continue
            failed_aggs.add(agg)
            c = classify(res)
            if c.code == KafkaError._PURGE_QUEUE:
                continue  # never sent: stays pending, no attempt counted
            out.errors += 1
            attempts = row.attempts + 1
            if c.retryable and not policy.exhausted(attempts):
                out.retry.append((row.id, policy.delay(attempts), c.reason))
            else:
                reason = c.reason if not c.retryable else f"gave up after {attempts} attempts: {c.reason}"
                out.failed.append((row.id, reason))
                log.error("relay %s: outbox row %s (%s %s) failed: %s", relay, row.id,
                          row.aggregatetype, row.aggregateid, reason)
        for agg in out.breaches:
            log.error("relay %s: order breach on %s %s: a later event was delivered after an "
                      "earlier one failed (message timeout)", relay, *agg)
        return out
