"""OutboxRelay: publish committed outbox rows to Kafka — none lost, per-aggregate order, several instances.

One batch (one thread, one confluent-kafka ``Producer``)::

    rebalance/renew shard leases           (between batches; renew also while waiting)
    claim  <= batch_size due pending rows of leased shards, seq order, held-back
           aggregates skipped                                   (store.claim)
    produce every row: topic = prefix + aggregatetype, key = aggregateid,
           value = payload, headers from columns                (idempotent, acks=all)
           (one PRODUCER span per row, child of the row's traceparent; the header
           ``traceparent`` carries that span — casestream.telemetry.publish_span)
    poll until every delivery report is in                      (renewing leases)
    record outcomes in ONE transaction: delivered → published/deleted,
           transient error → attempts+1, next_attempt_at = now + backoff with jitter,
           non-retryable → failed with reason                   (store.mark_outcomes)

When every row of a batch was delivered, its bookkeeping runs on a second connection
(one bookkeeping thread) while the next batch is claimed — excluding the rows still being
marked by ``seq`` — and produced (``RelaySettings.pipeline``). A batch with any failure
is marked synchronously before the next claim, so held-back rules always see it.

A row is published only when its delivery report has no error. A crash anywhere before
the bookkeeping commit leaves the row pending: the next owner produces it again, with
the same event id (the ``id`` header), so duplicates happen only around a crash.

Ordering: one shard → one producing instance (leases); within a batch rows go to the
idempotent producer in ``seq`` order, and librdkafka keeps per-partition order across its
internal retries. If a row fails synchronously (e.g. MSG_SIZE_TOO_LARGE against
``message.max.bytes``) the aggregate's later rows are not produced in that batch, and
the claim query holds them back while the failed row is failed or backing off — other
aggregates keep flowing. Residual risk, by librdkafka's design (INTRODUCTION.md, "Message
timeout considerations"): if an outage outlasts ``message.timeout.ms`` (default 300 s)
a timed-out message can leave a gap that a later message of the same partition fills;
the relay then counts an ``order_breaches_total`` and logs the aggregate. To make that
rarer, the first ``_MSG_TIMED_OUT`` report of a batch purges the not-yet-sent messages
(they stay pending, no attempt counted).

Idle: wait on ``LISTEN casestream_outbox`` (insert trigger) up to ``poll_interval_s``.
Stop: finish the batch in hand (wait up to ``shutdown_timeout_s`` for reports), flush,
release the leases (another instance takes over at once).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Producer
from psycopg_pool import ConnectionPool

from casestream.kafka_config import enforce_producer_guarantees
from casestream import telemetry
from casestream.outbox import NOTIFY_CHANNEL, headers_for
from casestream.relay import store
from casestream.relay.classify import classify
from casestream.relay.leases import LeaseManager
from casestream.relay.metrics import RelayMetrics
from casestream.relay.settings import RelaySettings

__all__ = ["OutboxRelay", "FaultHook"]

log = logging.getLogger("casestream.relay")

FaultHook = Callable[[str], None]
"""Test hook called at stages ``"claimed"``, ``"produced"``, ``"delivered"`` (all reports
in, bookkeeping not yet done) and ``"marked"``; raising from it simulates a crash there."""

_PENDING = object()


class OutboxRelay:
    """Publishes one service database's outbox to Kafka.

    Args:
        pool_or_dsn: a ``psycopg_pool.ConnectionPool`` or a PostgreSQL URL. The relay holds
            one working connection and one LISTEN connection (always opened from the
            URL / the pool's conninfo, since it must stay dedicated).
        producer_config: confluent-kafka config; must hold ``bootstrap.servers``;
            :data:`casestream.kafka_config.PRODUCER_DEFAULTS` fill the rest and
            ``enable.idempotence``/``acks`` cannot be weakened (ConfigError).
        settings: :class:`RelaySettings`.
        name: relay name (e.g. ``"case.relay"``); the lease owner id is
            ``<name>/<host>/<pid>/<random>`` so two processes never share one.
        fault_hook: test-only crash injection, see :data:`FaultHook`.
        on_metrics: called with ``metrics.snapshot()`` after each metrics refresh.
    """

    def __init__(
        self,
        pool_or_dsn: ConnectionPool | str,
        producer_config: dict[str, Any],
        settings: RelaySettings | None = None,
        name: str = "relay",
        *,
        fault_hook: FaultHook | None = None,
        on_metrics: Callable[[dict[str, float]], None] | None = None,
    ) -> None:
        self.settings = settings or RelaySettings()
        self.name = name
        self.owner = f"{name}/{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.metrics = RelayMetrics()
        telemetry.observe_relay(name, self.metrics)  # exported at /metrics
        self._pool = pool_or_dsn if isinstance(pool_or_dsn, ConnectionPool) else None
        self._dsn = pool_or_dsn if isinstance(pool_or_dsn, str) else pool_or_dsn.conninfo
        self._producer_config = enforce_producer_guarantees(producer_config)
        self._producer_config.setdefault("client.id", name)
        self._producer_config["error_cb"] = self._on_error
        self._fault_hook = fault_hook
        self._on_metrics = on_metrics
        self._leases = LeaseManager(self.owner, name, self.settings.lease_s)
        self._conn: psycopg.Connection | None = None
        self._listen: psycopg.Connection | None = None
        self._producer: Producer | None = None
        self._fatal: KafkaError | None = None
        self._next_rebalance = 0.0  # between batches: heartbeat, renew, balance, acquire
        self._next_renew = 0.0      # while a batch waits for reports: renew only
        self._next_cleanup = 0.0
        self._next_metrics = 0.0
        self._db_failures = 0
        self._stop = threading.Event()
        # Pipelined bookkeeping: one fully delivered batch may be marked on a second
        # connection while the next batch is claimed and produced (settings.pipeline).
        self._marker: ThreadPoolExecutor | None = None
        self._mark_future: Future[None] | None = None
        self._mark_seqs: list[int] = []
        self._mark_conn: psycopg.Connection | None = None

    # ------------------------------------------------------------------ public API

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set, then flush, release leases and close.

        Database and broker outages are ridden out with backoff (``settings.retry``);
        the method returns only after ``stop`` is set. Errors from ``fault_hook``
        propagate (simulated crash: nothing is cleaned up, like a killed process).
        """
        self._stop = stop
        log.info("relay %s starting (owner %s)", self.name, self.owner)
        # Create the producer now: its broker connection and idempotent producer id
        # (InitProducerId) are then ready before the first event commits.
        self._get_producer().poll(0)
        try:
            while not stop.is_set():
                try:
                    published = self._iteration()
                    self._db_failures = 0
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    self._db_error(e)
                    continue
                if published < self.settings.batch_size:
                    self._idle_wait()
        finally:
            if not stop.is_set():  # an exception escapes: behave like a crash
                self._abandon()
            else:
                self.close()
        log.info("relay %s stopped", self.name)

    def run_once(self) -> int:
        """Run one iteration (lease upkeep + one batch); return rows published. For tests."""
        return self._iteration()

    def close(self) -> None:
        """Flush the producer (``shutdown_timeout_s``), finish bookkeeping, release leases, close."""
        try:
            self._drain_marker()
        except psycopg.Error as e:
            log.warning("relay %s: last bookkeeping failed (%s); those rows stay pending and "
                        "will be produced again", self.name, e)
        self._stop_marker()
        if self._producer is not None:
            remaining = self._producer.flush(self.settings.shutdown_timeout_s)
            if remaining:
                log.warning("relay %s: %d messages undelivered at shutdown; their rows stay "
                            "pending and will be produced again", self.name, remaining)
            self._producer = None
        if self._conn is not None and not self._conn.closed:
            try:
                self._leases.release_all(self._conn)
            except psycopg.Error as e:
                log.warning("relay %s: could not release leases: %s", self.name, e)
        self._close_connections()

    @property
    def shards(self) -> frozenset[int]:
        """Shards this instance leased at its last renewal."""
        return self._leases.held

    # ------------------------------------------------------------------ loop parts

    def _iteration(self) -> int:
        conn = self._connection()
        now = time.monotonic()
        if now >= self._next_rebalance or not self._leases.valid():
            self._leases.rebalance(conn)
            self.metrics.shards_held = len(self._leases.held)
            self._next_rebalance = self._next_renew = now + self.settings.renew_every_s
        if self._fatal is not None:
            self._restart_producer()
        published = self._batch(conn) if self._leases.held else 0
        if now >= self._next_cleanup and self._leases.held:
            self._cleanup(conn)
            self._next_cleanup = now + self.settings.cleanup_interval_s
        if now >= self._next_metrics:
            self._refresh_metrics(conn)
            self._next_metrics = now + self.settings.metrics_interval_s
        return published

    def _batch(self, conn: psycopg.Connection) -> int:
        s = self.settings
        started = time.monotonic()
        if not self._leases.valid():
            return 0  # possibly expired: renew (next iteration) before claiming
        in_flight: list[int] = []
        if self._mark_future is not None:
            if self._mark_future.done():
                self._drain_marker()
            else:
                in_flight = self._mark_seqs  # still 'pending' in the table until marked
        rows = store.claim(conn, self._leases.held, s.batch_size, in_flight=in_flight)
        if not rows and in_flight:
            self._drain_marker()  # idle: finish bookkeeping before reporting "nothing to do"
        if not rows:
            return 0
        self._hook("claimed")
        producer = self._get_producer()
        n = len(rows)
        results: list[Any] = [_PENDING] * n
        outstanding = [0]
        purged = [False]

        spans: list[Any] = [None] * n  # casestream.telemetry.PublishSpan per produced row

        def report(i: int) -> Callable[[KafkaError | None, Any], None]:
            def on_delivery(err: KafkaError | None, msg: Any) -> None:
                outstanding[0] -= 1
                spans[i].end(err)
                if err is None:
                    ts = msg.timestamp()[1]
                    results[i] = store.Delivered(rows[i].id, ts, msg.partition(), msg.offset())
                else:
                    results[i] = err
                    if not purged[0] and err.code() == KafkaError._MSG_TIMED_OUT:
                        purged[0] = True  # keep the rest of the batch from filling a gap
                        try:
                            producer.purge(in_queue=True, in_flight=False, blocking=False)
                        except KafkaException:
                            pass
            return on_delivery

        blocked: set[tuple[str, str]] = set()
        prefix = s.topic_prefix
        for i, row in enumerate(rows):
            agg = (row.aggregatetype, row.aggregateid)
            if agg in blocked or purged[0]:
                continue  # stays pending, untouched (not an attempt)
            spans[i] = telemetry.publish_span(self.name, prefix + row.aggregatetype, row)
            headers = headers_for(row.id, row.type, row.event_version, spans[i].traceparent,
                                  row.correlation_id)
            while True:
                try:
                    producer.produce(prefix + row.aggregatetype, value=row.payload,
                                     key=row.aggregateid.encode(), headers=headers,
                                     on_delivery=report(i))
                    outstanding[0] += 1
                    break
                except BufferError:  # local queue full: serve reports, then try again
                    producer.poll(s.delivery_poll_s)
                except KafkaException as e:
                    results[i] = e.args[0]
                    spans[i].end(e.args[0])
                    blocked.add(agg)
                    break
        self._hook("produced")
        self._await_reports(conn, producer, outstanding)
        self._hook("delivered")
        published = self._record(conn, rows, results)
        self._hook("marked")
        self.metrics.batches_total += 1
        self.metrics.last_batch_size = n
        self.metrics.last_batch_seconds = time.monotonic() - started
        return published

    def _await_reports(self, conn: psycopg.Connection, producer: Producer, outstanding: list[int]) -> None:
        s = self.settings
        producer.poll(0)
        give_up_at: float | None = None
        while outstanding[0] > 0:
            producer.poll(s.delivery_poll_s)
            now = time.monotonic()
            if now >= self._next_renew:
                try:
                    self._leases.renew(conn)
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    log.warning("relay %s: lease renewal failed while waiting: %s", self.name, e)
                self._next_renew = now + s.renew_every_s
            if self._stop.is_set():
                give_up_at = give_up_at or now + s.shutdown_timeout_s
                if now >= give_up_at:
                    log.warning("relay %s: stopping with %d delivery reports outstanding",
                                self.name, outstanding[0])
                    return

    def _record(self, conn: psycopg.Connection, rows: list[store.OutboxRow], results: list[Any]) -> int:
        delivered: list[store.Delivered] = []
        retry: list[tuple[str, float, str]] = []
        failed: list[tuple[str, str]] = []
        failed_aggs: set[tuple[str, str]] = set()
        breaches: set[tuple[str, str]] = set()
        policy = self.settings.retry
        for row, res in zip(rows, results):
            agg = (row.aggregatetype, row.aggregateid)
            if res is _PENDING:
                continue
            if isinstance(res, store.Delivered):
                if agg in failed_aggs:
                    breaches.add(agg)
                delivered.append(res)
                continue
            c = classify(res)
            failed_aggs.add(agg)
            if c.code in (KafkaError._PURGE_QUEUE,):
                continue  # never sent: stays pending, no attempt counted
            self.metrics.delivery_errors_total += 1
            attempts = row.attempts + 1
            if c.retryable and not policy.exhausted(attempts):
                retry.append((row.id, policy.delay(attempts), c.reason))
            else:
                reason = c.reason if not c.retryable else f"gave up after {attempts} attempts: {c.reason}"
                failed.append((row.id, reason))
                log.error("relay %s: outbox row %s (%s %s) failed: %s", self.name, row.id,
                          row.aggregatetype, row.aggregateid, reason)
        for agg in breaches:
            log.error("relay %s: order breach on %s %s: a later event was delivered after an "
                      "earlier one failed (message timeout)", self.name, *agg)
        delete = self.settings.published_retention_s == 0
        self._drain_marker()  # at most one batch in bookkeeping at a time
        if self.settings.pipeline and len(delivered) == len(rows):
            # Everything delivered: nothing can be held back by this batch, so its
            # bookkeeping may overlap the next batch (which excludes these rows).
            self._mark_seqs = [r.seq for r in rows]
            self._mark_future = self._get_marker().submit(self._mark_delivered, delivered, delete)
        else:
            store.mark_outcomes(conn, delivered=delivered, retry=retry, failed=failed,
                                delete_published=delete)
        m = self.metrics
        m.published_total += len(delivered)
        m.retried_total += len(retry)
        m.failed_total += len(failed)
        m.order_breaches_total += len(breaches)
        return len(delivered)

    def _get_marker(self) -> ThreadPoolExecutor:
        if self._marker is None:
            self._marker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-bookkeeping")
        return self._marker

    def _mark_delivered(self, delivered: list[store.Delivered], delete: bool) -> None:
        # Runs on the bookkeeping thread, with its own connection.
        try:
            if self._mark_conn is None or self._mark_conn.closed or self._mark_conn.broken:
                self._mark_conn = psycopg.connect(self._dsn, autocommit=True,
                                                  application_name=f"{self.name} relay bookkeeping")
            store.mark_outcomes(self._mark_conn, delivered=delivered, retry=[], failed=[],
                                delete_published=delete)
        except psycopg.Error:
            if self._mark_conn is not None:
                self._mark_conn.close()
                self._mark_conn = None
            raise

    def _drain_marker(self) -> None:
        """Wait for the batch in bookkeeping (re-raises its database error)."""
        future, self._mark_future = self._mark_future, None
        self._mark_seqs = []
        if future is not None:
            future.result()

    def _stop_marker(self) -> None:
        if self._marker is not None:
            self._marker.shutdown(wait=True)
            self._marker = None
        if self._mark_conn is not None:
            try:
                self._mark_conn.close()
            except psycopg.Error:
                pass
            self._mark_conn = None

    def _idle_wait(self) -> None:
        timeout = min(self.settings.poll_interval_s,
                      max(0.0, self._next_rebalance - time.monotonic()))
        try:
            listen = self._listener()
            deadline = time.monotonic() + timeout
            while not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                # psycopg >= 3.2: Connection.notifies(timeout=, stop_after=). The generator
                # holds the connection lock until exhausted or closed: never nest or
                # abandon one (that deadlocks the next call).
                gen = listen.notifies(timeout=min(remaining, 0.25), stop_after=1)
                try:
                    woke = any(True for _ in gen)
                finally:
                    gen.close()
                if woke:
                    drain = listen.notifies(timeout=0)  # the rest of a burst: one wake-up
                    try:
                        for _ in drain:
                            pass
                    finally:
                        drain.close()
                    return
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            log.warning("relay %s: LISTEN connection lost: %s", self.name, e)
            self._close_listener()
            self._stop.wait(timeout)

    def _cleanup(self, conn: psycopg.Connection) -> None:
        keep = self.settings.published_retention_s
        if keep <= 0:
            return
        deleted = store.delete_published(conn, self.owner, keep, self.settings.cleanup_batch)
        self.metrics.cleaned_total += deleted

    def _refresh_metrics(self, conn: psycopg.Connection) -> None:
        st = store.stats(conn)
        m = self.metrics
        m.outbox_pending_total = st.pending
        m.outbox_failed_total = st.failed
        m.outbox_oldest_pending_age_seconds = st.oldest_pending_age_s
        m.shards_held = len(self._leases.held)
        if self._on_metrics is not None:
            self._on_metrics(m.snapshot())

    # ------------------------------------------------------------------ resources

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._dsn, autocommit=True,
                                         application_name=f"{self.name} relay")
        return self._conn

    def _listener(self) -> psycopg.Connection:
        if self._listen is None or self._listen.closed or self._listen.broken:
            self._listen = psycopg.connect(self._dsn, autocommit=True,
                                           application_name=f"{self.name} relay listen")
            self._listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return self._listen

    def _get_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._producer_config)
        return self._producer

    def _restart_producer(self) -> None:
        log.error("relay %s: fatal producer error %s; recreating the producer", self.name, self._fatal)
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None
        self._fatal = None
        self.metrics.producer_restarts_total += 1

    def _on_error(self, err: KafkaError) -> None:
        # error_cb runs inside poll()/flush() on the relay thread.
        if err.fatal():
            self._fatal = err
        else:
            log.debug("relay %s: producer error %s", self.name, err)

    def _db_error(self, e: Exception) -> None:
        self._mark_future = None  # its rows stay pending: produced again (same ids)
        self._mark_seqs = []
        self._db_failures += 1
        self.metrics.db_errors_total += 1
        delay = self.settings.retry.delay(self._db_failures)
        log.warning("relay %s: database error (%s); retrying in %.2f s", self.name, e, delay)
        self._close_connections()
        self._stop.wait(delay)

    def _hook(self, stage: str) -> None:
        if self._fault_hook is not None:
            self._fault_hook(stage)

    def _abandon(self) -> None:
        """Crash semantics: drop everything without bookkeeping or lease release."""
        self._mark_future = None
        self._stop_marker()
        if self._producer is not None:
            self._producer.purge()
            self._producer.poll(0)
            self._producer = None
        self._close_connections()

    def _close_listener(self) -> None:
        if self._listen is not None:
            try:
                self._listen.close()
            except psycopg.Error:
                pass
            self._listen = None

    def _close_connections(self) -> None:
        self._close_listener()
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None
