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
from casestream.kafka.topics import record_batch_size, record_batch_size_at_most
from casestream.outbox.writer import headers_for
from casestream.outbox.relay import store
from casestream.outbox.relay.classify import classify
from casestream.retry import RetryPolicy

__all__ = ["InFlightBatch", "Outcomes", "SIZE_REJECTION_CODES"]

log = logging.getLogger("casestream.relay")

_PENDING = object()

#: Broker answers to a produce request whose record batch exceeds a limit (topic
#: ``max.message.bytes``: MESSAGE_TOO_LARGE; ``segment.bytes``: RECORD_LIST_TOO_LARGE).
#: librdkafka reports them on every message of the rejected batch.
SIZE_REJECTION_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


@dataclass(frozen=True, slots=True)
class Refused:
    """A row the relay did not send because it cannot be accepted on its own; ``reason``
    names the limit (stored in ``outbox.last_error``)."""

    reason: str


@dataclass(slots=True)
class Outcomes:
    """What one settled batch records (``store.mark_outcomes``) and counts.

    ``delivered``: confirmed rows; ``retry``: ``(id, delay_s, reason)``; ``failed``:
    ``(id, reason)``; ``errors``: failed delivery reports or synchronous produce errors
    (rows purged before sending are not errors); ``breaches``: aggregates with a later row
    delivered after an earlier one failed; ``gave_up``: rows failed because their
    retryable error used up ``max_attempts``; ``rejected_topics``: topics whose record
    batch the broker refused as too large although this row fits on its own (the relay
    then reads the topic's limit again and sends smaller batches).
    """

    delivered: list[store.Delivered] = field(default_factory=list)
    retry: list[tuple[str, float, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0
    breaches: set[tuple[str, str]] = field(default_factory=set)
    gave_up: int = 0
    rejected_topics: set[str] = field(default_factory=set)


class InFlightBatch:
    """The rows of one claim, produced in ``seq`` order; one result slot per row.

    Args:
        rows: claimed rows in ``seq`` order.
        full: the claim returned ``batch_size`` rows (a backlog: the relay awaits this
            batch before claiming again rather than overlapping).
    """

    def __init__(self, rows: list[store.OutboxRow], *, full: bool, topic_prefix: str) -> None:
        self.rows = rows
        self.full = full
        self.seqs = [r.seq for r in rows]
        self.aggregate_ids = {r.aggregateid for r in rows}
        self.topics = [topic_prefix + r.aggregatetype for r in rows]
        self._results: list[Any] = [_PENDING] * len(rows)
        self._headers: list[Any] = [()] * len(rows)
        self._limits: dict[str, int] = {}
        self._spans: list[Any] = [None] * len(rows)
        self._outstanding = 0
        self._purged = False
        self.started = time.monotonic()
        self.published = 0  # rows confirmed, set when the batch is settled
        self.fence: store.Fence | None = None  # the leases of the claim (store.mark_outcomes)

    @property
    def done(self) -> bool:
        """True when no delivery report is outstanding."""
        return self._outstanding == 0

    @property
    def outstanding(self) -> int:
        """Rows produced whose delivery report has not come yet."""
        return self._outstanding

    def produce(self, producer: Producer, relay: str, buffer_wait_s: float, *,
                limits: dict[str, int], compressed: bool = False,
                message_max_bytes: int | None = None) -> None:
        """Hand every row to ``producer`` (topic = prefix + aggregatetype, key = aggregateid).

        A row that cannot be accepted on its own is not sent: its record batch
        (:func:`casestream.kafka.topics.record_batch_size`) is larger than its topic's
        ``max.message.bytes`` in ``limits`` (bytes; only checked when ``compressed`` is
        False, since the broker measures the compressed batch), or ``produce`` fails
        synchronously (``MSG_SIZE_TOO_LARGE`` against the producer's ``message.max.bytes``,
        given as ``message_max_bytes`` for the reason). Such a row is failed with a reason
        naming the limit, and it blocks its aggregate's later rows in this batch, which
        stay pending untouched. A full local queue (``BufferError``,
        ``queue.buffering.max.messages``) is served by ``producer.poll(buffer_wait_s)`` and
        the row retried.
        """
        self._limits = dict(limits)
        blocked: set[tuple[str, str]] = set()
        for i, row in enumerate(self.rows):
            agg = (row.aggregatetype, row.aggregateid)
            if agg in blocked or self._purged:
                continue
            topic = self.topics[i]
            self._spans[i] = span = telemetry.publish_span(relay, topic, row)
            headers = headers_for(row.id, row.type, row.event_version, span.traceparent,
                                  row.correlation_id)
            key = row.aggregateid.encode()
            self._headers[i] = headers
            limit = limits.get(topic)
            # The exact size only when the cheap bound does not already fit (most rows).
            if (limit is not None and not compressed
                    and record_batch_size_at_most(key, row.payload, headers) > limit):
                size = record_batch_size(key, row.payload, headers)
                if size > limit:
                    self._refuse(i, agg, blocked, f"MSG_SIZE_TOO_LARGE: record of {size} bytes "
                                                  f"exceeds max.message.bytes={limit} of topic {topic}")
                    continue
            while True:
                try:
                    producer.produce(topic, value=row.payload, key=key,
                                     headers=headers, on_delivery=self._report(producer, i))
                    self._outstanding += 1
                    break
                except BufferError:
                    producer.poll(buffer_wait_s)
                except KafkaException as e:
                    err = e.args[0]
                    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                        limit_text = (f"message.max.bytes={message_max_bytes}"
                                      if message_max_bytes else "message.max.bytes")
                        self._refuse(i, agg, blocked, f"MSG_SIZE_TOO_LARGE: record of {self._size(i)} bytes "
                                                      f"exceeds the producer's {limit_text}")
                    else:
                        self._results[i] = err
                        span.end(err)
                        blocked.add(agg)
                    break

    def _size(self, i: int) -> int:
        row = self.rows[i]
        return record_batch_size(row.aggregateid.encode(), row.payload, self._headers[i])

    def _refuse(self, i: int, agg: tuple[str, str], blocked: set[tuple[str, str]], reason: str) -> None:
        self._results[i] = Refused(reason)
        self._spans[i].end(reason)
        blocked.add(agg)

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

        A refused row (too large on its own) is failed with its reason. A broker size
        rejection (:data:`SIZE_REJECTION_CODES`) of a row that fits its topic's limit on
        its own was caused by the batch it travelled in: the row is retried (the relay
        sends smaller batches) and its topic is listed in ``rejected_topics``. Other
        transient errors (``casestream.outbox.relay.classify``) are retried after
        ``policy.delay(attempts)`` until ``policy.exhausted`` — then failed, naming the
        attempts and the last error, and counted in ``gave_up``; the rest are failed with
        the reason. Rows never sent (skipped, or ``_PURGE_QUEUE``) are left pending.
        """
        out = Outcomes()
        failed_aggs: dict[tuple[str, str], str] = {}
        for i, (row, res) in enumerate(zip(self.rows, self._results)):
            agg = (row.aggregatetype, row.aggregateid)
            if res is _PENDING:
                continue
            if isinstance(res, store.Delivered):
                if agg in failed_aggs:
                    out.breaches.add(agg)
                out.delivered.append(res)
                continue
            if isinstance(res, Refused):
                failed_aggs[agg] = res.reason
                out.failed.append((row.id, res.reason))
                log.error("relay %s: outbox row %s (%s %s) failed: %s", relay, row.id,
                          row.aggregatetype, row.aggregateid, res.reason)
                continue
            c = classify(res)
            if c.code == KafkaError._PURGE_QUEUE:
                continue  # never sent: stays pending, no attempt counted
            retryable, reason = c.retryable, c.reason
            if c.code in SIZE_REJECTION_CODES:
                topic = self.topics[i]
                limit = self._limits.get(topic)
                retryable = True
                out.rejected_topics.add(topic)
                reason = (f"{res.name()}: the broker rejected the record batch holding this "
                          f"row ({self._size(i)} bytes alone; topic {topic} "
                          f"max.message.bytes={limit if limit is not None else 'unknown'} when "
                          f"sent); retried in smaller batches")
            failed_aggs[agg] = reason
            out.errors += 1
            attempts = row.attempts + 1
            if retryable and not policy.exhausted(attempts):
                out.retry.append((row.id, policy.delay(attempts), reason))
                continue
            if retryable:
                reason = f"gave up after {attempts} attempts (max_attempts): {reason}"
                out.gave_up += 1
            out.failed.append((row.id, reason[:1000]))
            log.error("relay %s: outbox row %s (%s %s) failed: %s", relay, row.id,
                      row.aggregatetype, row.aggregateid, reason)
        for agg in out.breaches:
            log.error("relay %s: order breach on %s %s: a later event was delivered after an "
                      "earlier one failed (%s)", relay, *agg, failed_aggs[agg])
        return out
