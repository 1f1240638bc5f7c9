"""OutboxRelay: publish committed outbox rows to Kafka — none lost, per-aggregate order, several instances.

One batch (one thread, one confluent-kafka ``Producer``)::

    rebalance/renew shard leases           (between batches; renew also while waiting; also
                                            reads outbox_publisher: claims nothing while it
                                            says ``cdc``, casestream.outbox.cdc)
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

Overlap (``RelaySettings.max_open_batches``, default 2, in :meth:`OutboxRelay.run`): a
batch that was not full (no backlog) stays *open* while its reports come in, and a NOTIFY
during that wait claims and produces the next batch at once, so a commit does not wait
for the previous batch's broker round trip. The next claim excludes the open batches'
rows (by ``seq``) and every row of their aggregates (by ``aggregateid``, whatever the
type — conservative), so no batch carries a later event of an aggregate whose earlier
event may still fail. Open batches are settled oldest first. A full batch (backlog) is
awaited before the next claim, as without overlap: a throughput run gains nothing from
skipping busy aggregates. ``run_once`` never overlaps.

A row is published only when its delivery report has no error. A crash anywhere before
the bookkeeping commit leaves the row pending: the next owner produces it again, with
the same event id (the ``id`` header), so duplicates happen only around a crash.

Ordering: one shard → one producing instance (leases); within a batch rows go to the
idempotent producer in ``seq`` order, and librdkafka keeps per-partition order across its
internal retries. If a row cannot be sent (its record alone is larger than its topic's
``max.message.bytes`` or the producer's ``message.max.bytes``, or ``produce`` fails) the
aggregate's later rows are not produced in that batch, and the claim query holds them
back while the failed row is failed or backing off — other aggregates keep flowing.

Sizes: the broker refuses a whole record batch larger than the topic's
``max.message.bytes`` and librdkafka reports that error on every message in it, so a
batch must never hold more than the topic accepts. The relay reads each topic's limit
from the broker (``DescribeConfigs``, cached ``topic_limit_ttl_s``), fails only a row
whose record alone exceeds it (reason: the sizes and the limit), and keeps the producer's
``batch.size`` below the smallest limit of the topics it writes to (recreating the
producer, with no batch open, when a smaller one appears). Should the broker still refuse
a batch (the limit was lowered since it was read), its rows are retried, not failed: the
topic's limit is read again and ``batch.size`` halved (``size_rejections_total``). Residual risk, by librdkafka's design (INTRODUCTION.md, "Message
timeout considerations"): if an outage outlasts ``message.timeout.ms`` (default 300 s)
a timed-out message can leave a gap that a later message of the same partition fills;
the relay then counts an ``order_breaches_total`` and logs the aggregate. To make that
rarer, the first ``_MSG_TIMED_OUT`` report of a batch purges the not-yet-sent messages
(they stay pending, no attempt counted).

Stalled producer: librdkafka reports every message within ``message.timeout.ms`` (300 s),
but after a broker restart an idempotent producer has been seen to hold its messages that
long, with the relay renewing its shard leases while it waits: those shards' rows go
nowhere. A batch still without all its delivery reports ``report_timeout_s`` (30 s) after it
was claimed therefore ends the wait: the producer's queues are purged, it is recreated, the
open batches are dropped (their rows stay pending, no attempt counted) and produced again by
the new producer with the same ids (``report_timeouts_total``). A message the old producer
had sent may still have been written: such a row appears twice, the copy later, as around
a crash. Rows rescheduled after a delivery error are logged once per batch (count, first
error, delays).

Idle: wait on ``LISTEN casestream_outbox`` (insert trigger) up to ``poll_interval_s``. When
the LISTEN connection is opened the relay sends itself a ``NOTIFY`` and waits
``LISTEN_PROBE_S`` for it: behind a transaction pooler (PgBouncer ``pool_mode=transaction``)
the LISTEN stays on a server connection the pooler hands to other clients and nothing comes
back, so the relay says so in one warning and polls every ``poll_interval_s`` instead.
Stop: finish the batches in hand (wait up to ``shutdown_timeout_s`` for reports), flush,
release the leases (another instance takes over at once).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Producer
from psycopg_pool import ConnectionPool

from casestream.errors import ConfigError
from casestream.forks import ProcessBound
from casestream.kafka.config import admin_config, connection_config, enforce_producer_guarantees
from casestream.kafka.topics import TopicLimits
from casestream import telemetry
from casestream.outbox.writer import NOTIFY_CHANNEL
from casestream.outbox.relay import store
from casestream.outbox.relay.batch import InFlightBatch
from casestream.outbox.relay.floor import ClaimFloor
from casestream.outbox.relay.leases import LeaseManager
from casestream.outbox.relay.metrics import RelayMetrics
from casestream.outbox.relay.settings import RelaySettings

__all__ = ["OutboxRelay", "FaultHook"]

log = logging.getLogger("casestream.relay")

#: librdkafka defaults (CONFIGURATION.md) of ``batch.size`` and ``message.max.bytes``, bytes.
LIBRDKAFKA_BATCH_SIZE = 1_000_000
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
#: Bytes kept free below a topic's ``max.message.bytes`` when sizing ``batch.size``.
BATCH_FRAMING_MARGIN = 512
#: Smallest ``batch.size`` the relay shrinks to after a broker size rejection, bytes.
MIN_BATCH_SIZE = 1024
#: Seconds the relay waits for its own probe ``NOTIFY`` on a new LISTEN connection.
LISTEN_PROBE_S = 2.0

FaultHook = Callable[[str], None]
"""Test hook called at stages ``"claimed"``, ``"produced"``, ``"delivered"`` (all reports
in, bookkeeping not yet done) and ``"marked"``; raising from it simulates a crash there."""


class OutboxRelay:
    """Publishes one service database's outbox to Kafka.

    Args:
        pool_or_dsn: a ``psycopg_pool.ConnectionPool`` or a PostgreSQL URL. The relay holds
            one working connection and one LISTEN connection (always opened from the
            URL / the pool's conninfo, since it must stay dedicated).
        producer_config: confluent-kafka config; must hold ``bootstrap.servers``;
            :data:`casestream.kafka.config.PRODUCER_DEFAULTS` fill the rest and
            ``enable.idempotence``/``acks`` cannot be weakened (ConfigError), and an unknown
            or invalid librdkafka property is a ConfigError naming it. ``batch.size`` is an
            upper bound: the relay lowers it below the smallest ``max.message.bytes`` of the
            topics it writes to.
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
        self._made_in = ProcessBound(f"outbox relay {name}")
        self.owner = f"{name}/{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.metrics = RelayMetrics()
        telemetry.observe_relay(name, self.metrics)  # exported at /metrics
        self._pool = pool_or_dsn if isinstance(pool_or_dsn, ConnectionPool) else None
        self._dsn = pool_or_dsn if isinstance(pool_or_dsn, str) else pool_or_dsn.conninfo
        self._producer_config = enforce_producer_guarantees(producer_config)
        self._producer_config.setdefault("client.id", name)
        self._producer_config["error_cb"] = self._on_error
        # Record batches must fit the smallest max.message.bytes of the topics written to
        # (the broker refuses a whole batch otherwise): batch.size is lowered to fit, and the
        # producer recreated, when a topic with a smaller limit appears (_fit_batches).
        self._batch_size_limit = int(self._producer_config.get("batch.size", LIBRDKAFKA_BATCH_SIZE))
        self._compressed = str(self._producer_config.get(
            "compression.type", self._producer_config.get("compression.codec", "none"))) != "none"
        self._message_max_bytes = self._producer_config.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES)
        self._topic_limits = TopicLimits(admin_config(connection_config(self._producer_config)),
                                         ttl_s=self.settings.topic_limit_ttl_s)
        self._fault_hook = fault_hook
        self._on_metrics = on_metrics
        self._leases = LeaseManager(self.owner, name, self.settings.lease_s)
        self._conn: psycopg.Connection | None = None
        self._listen: psycopg.Connection | None = None
        self._listen_works = True  # False: LISTEN gets nothing here (a transaction pooler)
        self._fatal: KafkaError | None = None
        self._stalled: str | None = None  # why the producer is to be recreated (report timeout)
        try:  # a misspelt or invalid property fails here, not in the worker thread
            self._producer: Producer | None = Producer(self._producer_config)
        except KafkaException as e:
            raise ConfigError(f"producer properties of relay {name!r}: {e.args[0].str()}") from None
        self._next_rebalance = 0.0  # between batches: heartbeat, renew, balance, acquire
        self._next_renew = 0.0      # while a batch waits for reports: renew only
        self._next_cleanup = 0.0
        self._next_metrics = 0.0
        self._db_failures = 0
        self._stop = threading.Event()
        self._cdc_publishes = False  # read from outbox_publisher at every rebalance
        self._floor = ClaimFloor(self.settings.claim_floor_interval_s)
        self._use_floor = False  # settings.claim_floor and the table exists (read at rebalance)
        self._give_up_at: float | None = None  # monotonic end of the shutdown budget
        self._pending_shrink: int | None = None  # batch.size to use after a size rejection
        self._claim_skipped_busy = False  # the last claim excluded open batches' aggregates
        self._open: deque[InFlightBatch] = deque()  # produced, reports outstanding or unsettled
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

        Raises:
            ForkedClientError: the relay (its producer) was made in another process.
        """
        self._made_in.check()
        self._stop = stop
        log.info("relay %s starting (owner %s)", self.name, self.owner)
        # Create the producer now: its broker connection and idempotent producer id
        # (InitProducerId) are then ready before the first event commits.
        self._get_producer().poll(0)
        self._topic_limits.warm()  # likewise the admin client that reads topic limits
        try:
            self._listener()  # LISTEN before the first claim: no commit after it goes unnoticed
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            self._listener_lost(e)  # opened again by the first wait
        try:
            while not stop.is_set():
                try:
                    claimed = self._iteration(overlap=self.settings.max_open_batches > 1)
                    self._db_failures = 0
                    if claimed < self.settings.batch_size:
                        self._wait_for_work()
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    self._db_error(e)
        finally:
            if not stop.is_set():  # an exception escapes: behave like a crash
                self._abandon()
            else:
                self.close()
        log.info("relay %s stopped", self.name)

    def run_once(self) -> int:
        """Run one iteration (lease upkeep + one batch, awaited and recorded); return rows
        published. For tests and benchmarks; never overlaps batches."""
        return self._iteration(overlap=False)

    def close(self) -> None:
        """Finish the batches in hand within ``shutdown_timeout_s`` (delivery reports, then
        their bookkeeping), flush the producer, release the leases, close.

        Every row whose delivery report came in is marked before the leases are released, so
        a stop within the budget publishes nothing twice. When the budget runs out first, the
        producer's unsent messages are purged (their rows stay pending: the next owner produces
        them once), the reports that did come in are recorded, and the rows still awaiting
        theirs are counted in the log as possibly published twice (the next owner produces
        them again; as around a crash). A bookkeeping statement still running then keeps the
        leases: they expire after ``lease_s``, by when it has landed, instead of being released
        to a next owner that would claim its rows again."""
        uncertain = 0  # rows the next owner may publish a second time
        marking = False  # a bookkeeping statement still runs: keep the leases
        try:
            conn = self._connection()
            if not self._settle_all(conn):
                uncertain += self._give_up_open(conn)
            marking = not self._finish_marking()
            if marking:
                uncertain += len(self._mark_seqs)
        except psycopg.Error as e:
            uncertain += sum(len(b.rows) for b in self._open) + len(self._mark_seqs)
            log.warning("relay %s: last bookkeeping failed (%s); those rows stay pending and "
                        "will be produced again", self.name, e)
        self._open.clear()
        self._stop_marker(wait=not marking)
        if self._producer is not None:
            remaining = self._producer.flush(self._shutdown_left())
            if remaining:
                log.warning("relay %s: %d messages undelivered at shutdown; their rows stay "
                            "pending and will be produced again", self.name, remaining)
            self._producer = None
        if uncertain:
            log.warning("relay %s: shutdown_timeout_s=%g s ran out: %d rows were sent without a "
                        "delivery report or their marking did not finish; they stay pending and "
                        "the next owner may publish them a second time (consumers' inboxes skip "
                        "the copy)%s", self.name, self.settings.shutdown_timeout_s, uncertain,
                        f"; leases left to expire in {self.settings.lease_s:g} s" if marking else "")
        else:
            log.info("relay %s: every delivered row marked published; nothing will be "
                     "published twice", self.name)
        if not marking and self._conn is not None and not self._conn.closed:
            try:
                self._leases.release_all(self._conn)
            except psycopg.Error as e:
                log.warning("relay %s: could not release leases: %s", self.name, e)
        self._close_connections()

    def _give_up_open(self, conn: psycopg.Connection) -> int:
        """The shutdown budget ran out with batches open: purge what the producer has not sent
        (no report: stays pending), record every outcome that came in; returns the rows still
        without a delivery report (sent, fate unknown)."""
        producer = self._producer
        if producer is not None:
            try:
                producer.purge(in_queue=True, in_flight=False, blocking=False)
            except KafkaException:
                pass
            producer.poll(0)  # the purge's reports and any that arrived meanwhile
        outstanding = 0
        while self._open:
            batch = self._open.popleft()
            outstanding += batch.outstanding
            # Partial outcomes are safe: reports come in partition order, so a row left
            # pending never precedes a delivered row of its aggregate.
            batch.published = self._record(conn, batch)
        return outstanding

    def _finish_marking(self) -> bool:
        """Wait for the batch in bookkeeping within the shutdown budget (re-raises its database
        error); False if it still runs."""
        future = self._mark_future
        if future is None:
            return True
        try:
            future.result(timeout=self._shutdown_left())
        except TimeoutError:
            return False
        self._mark_future = None
        self._mark_seqs = []
        return True

    @property
    def listening(self) -> bool:
        """False once the LISTEN probe found that notifications do not reach this relay
        (it then publishes on its poll, ``poll_interval_s``)."""
        return self._listen_works

    @property
    def shards(self) -> frozenset[int]:
        """Shards this instance leased at its last renewal."""
        return self._leases.held

    # ------------------------------------------------------------------ loop parts

    def _iteration(self, overlap: bool) -> int:
        conn = self._connection()
        if self._fatal is not None:
            self._restart_producer(f"fatal producer error {self._fatal}")
            self._settle_reported(conn)
            self._drop_open("with the failed producer")
        elif self._stalled is not None:
            self.metrics.report_timeouts_total += 1
            self._restart_producer(self._stalled)
            self._drop_open("with the stalled producer")
        now = time.monotonic()
        if now >= self._next_rebalance or not self._leases.valid():
            # rebalance may release a shard: only with no batch open (LeaseManager.rebalance),
            # or another instance would produce rows still in flight here a second time.
            if not self._settle_all(conn):
                return 0  # stopping with reports outstanding
            # Likewise the batch still being marked on the bookkeeping connection: its rows are
            # pending until that commits, and the next owner would claim them again.
            self._drain_marker()
            self._leases.rebalance(conn)
            self.metrics.shards_held = len(self._leases.held)
            self._cdc_publishes = store.cdc_publishes(conn)
            self._use_floor = self.settings.claim_floor and store.has_claim_floor(conn)
            self._next_rebalance = self._next_renew = now + self.settings.renew_every_s
        if self._use_floor and self._leases.held and not self._cdc_publishes:
            self._floor.step(conn, now)
        published = self._cycle(conn, overlap) if self._leases.held or self._open else 0
        if now >= self._next_cleanup and self._leases.held:
            self._cleanup(conn)
            self._next_cleanup = now + self.settings.cleanup_interval_s
        if now >= self._next_metrics:
            self._refresh_metrics(conn)
            self._next_metrics = now + self.settings.metrics_interval_s
        return published

    def _cycle(self, conn: psycopg.Connection, overlap: bool) -> int:
        """Settle reported batches, claim and produce one batch; return rows claimed
        (``overlap`` False: rows published, after awaiting and settling that batch)."""
        s = self.settings
        self._settle_reported(conn)
        while self._open and (not overlap or len(self._open) >= s.max_open_batches
                              or self._open[-1].full):
            if not self._await_reports(self._open[0]):
                return 0  # stopping with reports outstanding
            self._settle_reported(conn)
        if not self._leases.valid():
            return 0  # possibly expired: renew (next iteration) before claiming
        if self._cdc_publishes:
            return 0  # outbox_publisher says CDC publishes: claim nothing (casestream.outbox.cdc)
        if self._mark_future is not None and self._mark_future.done():
            self._drain_marker()
        exclude = self._mark_seqs + [seq for b in self._open for seq in b.seqs]
        busy = sorted({a for b in self._open for a in b.aggregate_ids})
        rows = store.claim(conn, self._leases.held, s.batch_size, in_flight=exclude,
                           busy_aggregates=busy, stored_floor=self._use_floor)
        self._claim_skipped_busy = bool(busy)
        if not rows:
            if self._mark_future is not None and not self._open:
                self._drain_marker()  # idle: finish bookkeeping before reporting "nothing to do"
            return 0
        fence = store.Fence(self.owner, *self._leases.fence())
        self._hook("claimed")
        batch = InFlightBatch(rows, full=len(rows) >= s.batch_size, topic_prefix=s.topic_prefix)
        batch.fence = fence
        limits = self._topic_limits.limits(batch.topics)
        if not self._fit_batches(conn, limits):
            return 0  # stopping with reports outstanding: the claimed rows stay pending
        if self._pending_shrink is not None and self._pending_shrink < self._batch_size_limit:
            if not self._settle_all(conn):
                return 0
            self._shrink_batches(self._pending_shrink, "the broker rejected a record batch as too large")
        self._pending_shrink = None
        if not self._leases.valid() and not self._still_fenced(conn, fence):
            # Paused (SIGSTOP, a VM or GC pause) or cut off since the claim for longer than the
            # lease, and another instance took a shard meanwhile: it may own these rows now.
            # The local monotonic clock runs on through a pause, so this sees it; the rows stay
            # pending for the lease holder.
            self.metrics.stale_claims_dropped_total += 1
            log.warning("relay %s: leases expired between claim and produce (process paused or "
                        "cut off?); %d claimed rows not sent, left to the lease holder",
                        self.name, len(rows))
            return 0
        batch.produce(self._get_producer(), self.name, s.delivery_poll_s, limits=limits,
                      compressed=self._compressed, message_max_bytes=self._message_max_bytes)
        self._hook("produced")
        self._open.append(batch)
        if overlap:
            return len(rows)
        self._await_reports(batch)
        self._settle_reported(conn)
        return batch.published

    def _fit_batches(self, conn: psycopg.Connection, limits: dict[str, int]) -> bool:
        """Lower the producer's ``batch.size`` below the smallest topic limit in ``limits``
        (minus :data:`BATCH_FRAMING_MARGIN`); the producer is recreated after every open
        batch is settled. False if stopping cut that wait short."""
        if not limits:
            return True
        want = max(MIN_BATCH_SIZE, min(limits.values()) - BATCH_FRAMING_MARGIN)
        if want >= self._batch_size_limit:
            return True
        if not self._settle_all(conn):
            return False
        self._shrink_batches(want, f"topic max.message.bytes={min(limits.values())}")
        return True

    def _shrink_batches(self, batch_size: int, why: str) -> None:
        """Recreate the producer with ``batch.size=batch_size`` (call with no batch open)."""
        log.info("relay %s: producer batch.size %d -> %d bytes (%s)", self.name,
                 self._batch_size_limit, batch_size, why)
        self._batch_size_limit = batch_size
        self._producer_config["batch.size"] = batch_size
        if self._producer is not None:
            self._producer.flush(self.settings.shutdown_timeout_s)
            self._producer = None

    def _settle_all(self, conn: psycopg.Connection) -> bool:
        """Await and record every open batch; False if stopping cut the wait short."""
        while self._open:
            if not self._await_reports(self._open[0]):
                return False
            self._settle_reported(conn)
        return True

    def _settle_reported(self, conn: psycopg.Connection) -> None:
        """Record the outcomes of open batches whose reports are all in, oldest first."""
        while self._open and self._open[0].done:
            batch = self._open[0]
            self._hook("delivered")
            # Removed only once recorded: after a database error the batch stays open, so
            # its rows stay excluded from claims and are recorded when the database is back.
            batch.published = self._record(conn, batch)
            self._open.popleft()
            self._hook("marked")
            self.metrics.batches_total += 1
            self.metrics.last_batch_size = len(batch.rows)
            self.metrics.last_batch_seconds = time.monotonic() - batch.started

    def _await_reports(self, batch: InFlightBatch) -> bool:
        """Serve delivery reports (renewing leases) until ``batch`` is done; False if the
        relay is stopping and ``shutdown_timeout_s`` passed first, or the reports are overdue
        (``report_timeout_s``: the next iteration recreates the producer)."""
        s = self.settings
        producer = self._get_producer()
        producer.poll(0)
        while not batch.done:
            producer.poll(s.delivery_poll_s)
            self._renew_while_waiting(time.monotonic())
            if self._reports_overdue(batch):
                return False
            if self._stop.is_set() and self._shutdown_left() <= 0:
                log.warning("relay %s: stopping with delivery reports outstanding", self.name)
                return False
        return True

    def _shutdown_left(self) -> float:
        """Seconds left of the one ``shutdown_timeout_s`` budget, counted from the first call
        after stopping began (reports, bookkeeping and the final flush share it)."""
        if self._give_up_at is None:
            self._give_up_at = time.monotonic() + self.settings.shutdown_timeout_s
        return max(0.0, self._give_up_at - time.monotonic())

    def _renew_while_waiting(self, now: float) -> None:
        if now >= self._next_renew:
            try:
                # A fresh connection if the database came back while the broker is away.
                self._leases.renew(self._connection())
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                log.warning("relay %s: lease renewal failed while waiting: %s", self.name, e)
                self._close_working_connection()
            self._next_renew = now + self.settings.renew_every_s

    def _wait_for_work(self) -> None:
        """Between partial batches: return on a NOTIFY (claim at once, even while a batch
        awaits its reports); settle batches as their reports come in; with nothing open,
        the idle LISTEN wait."""
        s = self.settings
        while self._open and not self._stop.is_set():
            if self._open[0].done:
                self._settle_reported(self._connection())
                if self._claim_skipped_busy:
                    # The last claim left out the settled batch's aggregates; a later event of
                    # one of them may be waiting, and its NOTIFY was already consumed.
                    return
                continue
            try:
                if self._notified(s.open_wait_s):
                    return
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                self._listener_lost(e)
                return  # claim now: polling stands in for the lost LISTEN
            self._get_producer().poll(0)
            self._renew_while_waiting(time.monotonic())
            if self._reports_overdue(self._open[0]):
                return  # the next iteration recreates the producer
        if not self._stop.is_set():
            self._idle_wait()

    def _record(self, conn: psycopg.Connection, batch: InFlightBatch) -> int:
        out = batch.outcomes(self.settings.retry, self.name)
        delete = self.settings.published_retention_s == 0
        self._drain_marker()  # at most one batch in bookkeeping at a time
        if self.settings.pipeline and len(out.delivered) == len(batch.rows):
            # Everything delivered: nothing can be held back by this batch, so its
            # bookkeeping may overlap the next claim (which excludes these rows).
            self._mark_seqs = batch.seqs
            self._mark_future = self._get_marker().submit(self._mark_delivered, out.delivered, delete,
                                                          batch.fence)
        else:
            self._fenced(store.mark_outcomes(conn, delivered=out.delivered, retry=out.retry,
                                             failed=out.failed, delete_published=delete,
                                             fence=batch.fence))
        if out.retry:
            delays = [delay for _id, delay, _reason in out.retry]
            log.warning("relay %s: %d rows rescheduled after a delivery error (%s), next attempt "
                        "in %.1f-%.1f s", self.name, len(out.retry), out.retry[0][2],
                        min(delays), max(delays))
        m = self.metrics
        m.published_total += len(out.delivered)
        m.delivery_errors_total += out.errors
        m.retried_total += len(out.retry)
        m.failed_total += len(out.failed)
        m.gave_up_total += out.gave_up
        m.order_breaches_total += len(out.breaches)
        if out.rejected_topics:
            # The topic limit changed since it was read, or framing was underestimated:
            # read it again and send batches half as large (the next batch recreates the producer).
            m.size_rejections_total += 1
            for topic in out.rejected_topics:
                self._topic_limits.forget(topic)
            self._pending_shrink = max(MIN_BATCH_SIZE, self._batch_size_limit // 2)
        return len(out.delivered)

    def _get_marker(self) -> ThreadPoolExecutor:
        if self._marker is None:
            self._marker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-bookkeeping")
        return self._marker

    def _fenced(self, refused: int) -> None:
        if refused:
            self.metrics.fenced_total += refused
            log.warning("relay %s: %d rows' outcomes refused: their shard's lease moved to another "
                        "instance (epoch changed) since the claim; the lease holder records them",
                        self.name, refused)

    def _mark_delivered(self, delivered: list[store.Delivered], delete: bool,
                        fence: store.Fence | None) -> None:
        # Runs on the bookkeeping thread, with its own connection.
        try:
            if self._mark_conn is None or self._mark_conn.closed or self._mark_conn.broken:
                self._mark_conn = psycopg.connect(self._dsn, autocommit=True, prepare_threshold=None,
                                                  application_name=f"{self.name} relay bookkeeping")
            self._fenced(store.mark_outcomes(self._mark_conn, delivered=delivered, retry=[], failed=[],
                                             delete_published=delete, fence=fence))
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

    def _stop_marker(self, wait: bool = True) -> None:
        """End the bookkeeping thread; ``wait`` False: a statement still runs on it, its
        connection is closed by that thread once the statement is over."""
        if self._marker is not None:
            if not wait:
                self._marker.submit(self._close_mark_conn)  # after the running statement
            self._marker.shutdown(wait=wait)
            self._marker = None
        if wait:
            self._close_mark_conn()

    def _close_mark_conn(self) -> None:
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
            deadline = time.monotonic() + timeout
            while not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._notified(min(remaining, 0.25)):
                    return
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            self._listener_lost(e)
            self._stop.wait(timeout)

    def _notified(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a NOTIFY on the LISTEN connection; True if one came
        (the rest of a burst is drained: one wake-up). Raises the connection's psycopg errors."""
        listen = self._listener()
        if listen is None:  # polling: LISTEN does not work through this connection
            self._stop.wait(timeout_s)
            return False
        # psycopg >= 3.2: Connection.notifies(timeout=, stop_after=). The generator holds
        # the connection lock until exhausted or closed: never nest or abandon one (that
        # deadlocks the next call).
        gen = listen.notifies(timeout=timeout_s, stop_after=1)
        try:
            woke = any(True for _ in gen)
        finally:
            gen.close()
        if woke:
            drain = listen.notifies(timeout=0)
            try:
                for _ in drain:
                    pass
            finally:
                drain.close()
        return woke

    def _listener_lost(self, e: Exception) -> None:
        log.warning("relay %s: LISTEN connection lost: %s", self.name, e)
        self._close_listener()

    def _cleanup(self, conn: psycopg.Connection) -> None:
        keep = self.settings.published_retention_s
        if keep <= 0:
            return
        deleted = store.delete_published(conn, self.owner, keep, self.settings.cleanup_batch)
        self.metrics.cleaned_total += deleted

    def _refresh_metrics(self, conn: psycopg.Connection) -> None:
        st = store.stats(conn, stored_floor=self._use_floor)
        m = self.metrics
        m.outbox_pending_total = st.pending
        m.outbox_failed_total = st.failed
        m.outbox_oldest_pending_age_seconds = st.oldest_pending_age_s
        m.shards_held = len(self._leases.held)
        m.postgres_xmin_horizon_age_seconds = store.xmin_horizon_age_s(conn)
        m.outbox_claim_floor = self._floor.value
        if self._on_metrics is not None:
            self._on_metrics(m.snapshot())

    # ------------------------------------------------------------------ resources

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            # No server-side prepared statements: behind a transaction pooler (PgBouncer
            # pool_mode=transaction) the next statement may run on another server connection.
            self._conn = psycopg.connect(self._dsn, autocommit=True, prepare_threshold=None,
                                         application_name=f"{self.name} relay")
            # The claim must walk outbox_pending_idx in seq order (store.claim): an index
            # scan skips the entries of rows already published once it has marked them
            # dead, while a bitmap scan, which stale statistics make look cheaper, visits
            # the heap for every entry left since the last VACUUM (3 ms instead of 0.3 ms
            # after a few seconds at 1,000 events/s).
            self._conn.execute("SET enable_bitmapscan = off")
        return self._conn

    def _listener(self) -> psycopg.Connection | None:
        """The LISTEN connection, opened (and probed) if needed; None once a probe found
        that notifications do not reach it (the relay then polls)."""
        if not self._listen_works:
            return None
        if self._listen is None or self._listen.closed or self._listen.broken:
            self._listen = psycopg.connect(self._dsn, autocommit=True,
                                           application_name=f"{self.name} relay listen")
            self._listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
            if not self._probe_listen(self._listen):
                self._listen_works = False
                self._close_listener()
                log.warning("relay %s: LISTEN %s receives no notifications through this connection "
                            "(a transaction pooler, e.g. PgBouncer pool_mode=transaction?); publishing "
                            "on the poll every %.2f s instead", self.name, NOTIFY_CHANNEL,
                            self.settings.poll_interval_s)
                return None
        return self._listen

    def _probe_listen(self, listen: psycopg.Connection) -> bool:
        """Send a NOTIFY from the working connection; True if ``listen`` receives it within
        :data:`LISTEN_PROBE_S` (other relays of the database wake up once for it)."""
        token = f"probe:{self.owner}"
        self._connection().execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, token))
        deadline = time.monotonic() + LISTEN_PROBE_S
        while (left := deadline - time.monotonic()) > 0:
            gen = listen.notifies(timeout=left, stop_after=1)
            try:
                if any(n.payload == token for n in gen):
                    return True
            finally:
                gen.close()
        return False

    def _still_fenced(self, conn: Any, fence: store.Fence) -> bool:
        """Whether the leases ``fence`` names are still this relay's at the same epochs, renewed
        now (a slow step, e.g. a metadata request, outlived the local lease deadline while no
        other relay took a shard). False when renewing fails."""
        try:
            self._leases.renew(conn)
        except psycopg.Error:
            return False
        held = dict(zip(*self._leases.fence()))
        return self._leases.valid() and all(held.get(shard) == epoch
                                            for shard, epoch in zip(fence.shards, fence.epochs))

    def _get_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._producer_config)
        return self._producer

    def _restart_producer(self, reason: str) -> None:
        log.error("relay %s: %s; recreating the producer", self.name, reason)
        if self._producer is not None:
            if self._stalled is None:
                self._producer.flush(1.0)
            else:  # a stalled producer would only spend the second
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer = None
        self._fatal = None
        self._stalled = None
        self.metrics.producer_restarts_total += 1

    def _drop_open(self, why: str) -> None:
        if self._open:
            # Their reports died with the old producer: the rows stay pending and are
            # produced again, with the same ids.
            log.warning("relay %s: %d open batches dropped %s", self.name, len(self._open), why)
            self._open.clear()

    def _reports_overdue(self, batch: InFlightBatch) -> bool:
        """True once ``batch`` has waited ``report_timeout_s`` for its delivery reports (the
        producer is then recreated by the next iteration)."""
        if self._stalled is not None:
            return True
        timeout = self.settings.report_timeout_s
        waited = time.monotonic() - batch.started
        if timeout is None or batch.done or waited < timeout:
            return False
        self._stalled = (f"{batch.outstanding} of {len(batch.rows)} rows of a batch without a "
                         f"delivery report after {waited:.0f} s (report_timeout_s={timeout:g})")
        return True

    def _on_error(self, err: KafkaError) -> None:
        # error_cb runs inside poll()/flush() on the relay thread.
        if err.fatal():
            self._fatal = err
        else:
            log.debug("relay %s: producer error %s", self.name, err)

    def _db_error(self, e: Exception) -> None:
        # Open batches stay open: settled once the database is back, and excluded from
        # claims until then, so their rows are not produced twice. The batch in
        # bookkeeping is dropped: its rows stay pending and are produced again (same ids).
        self._mark_future = None
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
        self._open.clear()
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
        self._close_working_connection()

    def _close_working_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None
