"""The consumer runtime: Kafka poll loop, offsets, rebalances, retries, graceful shutdown.

Driver module (confluent-kafka + psycopg pool). One ``ConsumerRuntime`` = one consumer group
member; a service runs it as a worker: ``runtime.run(stop)`` returns soon after ``stop`` is set.

Offsets (at-least-once delivery, effects applied once): ``enable.auto.commit=false``; after the batch
transaction has committed (and its dead letters are delivered), the runtime commits
``last processed + 1`` per partition with ``Consumer.commit(offsets=..., asynchronous=True)``,
one commit in flight at a time (its answer comes through ``on_commit``; offsets stay pending
until a commit of them succeeds), and synchronously in ``on_revoke`` and at shutdown. The loop
never waits for the group coordinator, so a broker outage does not hold it.
A crash between the DB commit and the offset commit redelivers the batch; the inbox and the
version guard make that a no-op.

Loop, in the main thread (one batch in the database at a time, the next one prefetched)::

    resume partitions whose retry backoff is over
    records = consume(num_messages=batch_size, timeout=poll_timeout_s)   # batch N+1
    decoded = processor.decode(records)          # overlaps batch N's database work
    wait for batch N in the worker thread; if it runs longer than heartbeat_after_s: pause every
        assigned partition and keep calling poll() (max.poll.interval.ms stays respected,
        rebalance callbacks still run)
    for cut partitions: pause, seek back to the failed message, resume after the backoff
    drop from N+1 what a rebalance or a rewind made stale (it is fetched again), hand N+1 to
        the worker thread, then commit batch N's offsets (asynchronously, while N+1 runs)

Rebalance (``ConsumerSettings.group_protocol``: ``classic`` with librdkafka's eager
``range,roundrobin`` assignors, which revoke everything each time, or with
``partition.assignment.strategy=cooperative-sticky``, or ``consumer``, KIP-848; the last two
revoke and assign incrementally): ``on_revoke`` waits for the batch in
flight (key-parallel: the running units), commits every pending offset synchronously, resumes
the revoked partitions it had paused and forgets only those (inbox/guard caches, held and
queued events, pending offsets); ``on_lost`` does the same without committing (the group has
already moved on); ``on_assign`` adds and resumes the partitions it hands over. Records of a
partition revoked after they were fetched are dropped (fetched again from its commit if it
comes back); the kept partitions' records are processed, since their fetch position did not
move. A commit refused for a stale member epoch or a fenced generation is logged and retried
with the next commit; the offsets stay pending, and what the next owner redelivers meanwhile
is deduplicated by the inbox and the version guard. librdkafka keeps an
application ``pause()`` on a partition across revoke and re-assign (it is a flag of the
partition object, not of the assignment), so a partition paused for a backoff and assigned
back would otherwise never be fetched again. After any rebalance each assigned partition is
thus fetched, or paused by a decision taken after the assignment: a message in backoff is
fetched once and its ``consumer_retry`` row (``casestream.consumer.retries``) pauses its
partition for the rest of the backoff, whichever member held it before.
Batch-level failures (database down, dead-letter topic unreachable) roll the batch back, rewind
every partition in it and retry after an exponential backoff (capped at ``retry.max_delay_s``), without
counting against any message.

Stall watchdog: every blocking step of the loop (``consume`` with the rebalance callbacks it
runs, waiting for the batch in the database, the synchronous offset commit) is recorded as
the loop's *phase* with its start time. A daemon thread checks it every few seconds: a phase
older than ``ConsumerSettings.stall_after_s`` is logged at ERROR once (``consumer stalled``,
with the phase, its age and the assigned/paused partitions), :meth:`ConsumerRuntime.stalled`
returns its description (the ``consumer`` readiness check of a service then fails) and the
end of the stall is logged at WARNING. A loop that stops making progress therefore shows in
the log and on ``/readyz`` instead of silently holding its partitions.

Key-parallel mode (``ConsumerSettings.key_concurrency > 1``): the loop decodes each poll
batch and queues it per aggregate in a :class:`~casestream.consumer.keyparallel.KeyScheduler`;
``key_concurrency`` worker threads (``casestream.consumer.keyworkers``) apply units of it, one
transaction each, while the loop keeps fetching. Per partition the loop commits the lowest
offset not yet applied; cuts seek their partition back as above. When more than
``max(2 x batch_size, 32 x key_concurrency)`` entries are queued the loop fetches one record
per step and librdkafka's own queue bounds what is prefetched; only at twice that are the
partitions paused (flow control: :func:`~casestream.consumer.keyparallel.key_queue_flow`).
Rebalance and shutdown wait for the running units; the sweep runs in the loop beside them.

Rejoin guard: from subscribing, and from each revoke or loss of its last partitions, the runtime
expects an assignment callback (empty or not) within ``ConsumerSettings.rejoin_timeout_s``
(default ``max.poll.interval.ms + session.timeout.ms``). Past that it closes its Kafka
consumer and subscribes a new one: a librdkafka client whose group join never leaves its
queue (seen after a broker restart: ``GroupCoordinator: Timed out 0 in-flight, ...
1 out-queue``) would otherwise hold no partitions for good while its loop looks healthy.

Topics created later: a subscribed topic that does not exist yet is logged once
(``consuming it once it is created``) and the consumer goes on with its other topics (at
least its re-drive topic, which it creates). librdkafka assigns a subscribed topic only once
a metadata refresh lists it, every ``topic.metadata.refresh.interval.ms`` (librdkafka's
default: 300,000 ms), and the group's leader then rebalances. The runtime sets that interval
to :data:`METADATA_REFRESH_MS` (5 s) unless ``kafka_config`` sets it, so a topic created
after the service started, or given more partitions, is consumed within seconds without a
restart; the cost is one Metadata request for the subscribed topics per interval and client.

Shutdown: when ``stop`` is set the current batch finishes and commits, pending offsets are
committed, the consumer is closed (leaves the group) and the dead-letter producer is flushed.
SIGTERM wiring belongs to the service (``casestream.service.process.ServiceProcess`` sets ``stop``).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from casestream import telemetry
from casestream.consumer.batch import TP, BatchProcessor, BatchResult, Decoded
from casestream.consumer.failures import connection_broken
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.settings import ConsumerSettings
from casestream.consumer.deadletters import DeadLetterSink, KafkaDeadLetters, record_from_message
from casestream.errors import ConfigError
from casestream.forks import ProcessBound
from casestream.handlers.registry import HandlerRegistry, OutboxAppender
from casestream.consumer.inbox import ensure_schema
from casestream.consumer.handlerloop import HandlerLoop
from casestream.consumer.keyparallel import FlowStep, key_queue_flow, key_queue_limit
from casestream.consumer.keyworkers import KeyWorkers, give_back, worker_threads
from casestream.kafka.config import KafkaTarget, client_config, connection_config
from casestream.kafka.lag import read_partitions
from casestream.kafka.topics import fetch_batch

log = logging.getLogger("casestream.consumer")


_FORCED = {"enable.auto.commit": False, "enable.auto.offset.store": False}
CONSUMER_PROTOCOL_REJECTS = ("partition.assignment.strategy", "session.timeout.ms",
                             "heartbeat.interval.ms", "group.protocol.type")
"""librdkafka consumer settings refused with ``group.protocol=consumer`` (KIP-848 moves
assignment and session timing to the broker: ``group.consumer.assignors``,
``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``)."""
_BROKER_SESSION_TIMEOUT_MS = 45000  # group.consumer.session.timeout.ms default (Kafka 4.x)


class ConsumerFenced(ConfigError):
    """A static member (``group.instance.id``) was fenced: another instance joined the group
    with the same identity. librdkafka raises it as a fatal error; the runtime stops with this
    one line (the process exits 1) instead of a second instance silently taking over."""
_COMMIT_RESEND_S = 10.0  # an asynchronous offset commit unanswered this long is sent again
_CLOSE_WAIT_S = 10.0  # how long a replaced Kafka consumer is given to close
KEY_DECODE_SLICE = 32  # records a key-parallel loop decodes between two GIL hand-overs
#: The consumer's default ``topic.metadata.refresh.interval.ms``: how soon a subscribed topic
#: created (or grown) after the subscription is assigned.
METADATA_REFRESH_MS = 5000
#: Seconds between two reads of the group's lag from Kafka (``queue_lag_messages``).
LAG_READ_INTERVAL_S = 10.0



class ConsumerRuntime:
    """Consumes ``topics`` (plus ``<name>.redrive``) as group ``name`` and applies ``handlers``.

    Args:
        name: consumer name = Kafka ``group.id`` = inbox consumer, e.g. ``"billing.invoices"``.
        topics: topics to subscribe to, e.g. ``["outbox.event.order"]``.
        handlers: the HandlerRegistry.
        codec: an ``EnvelopeDecoder`` (``casestream.events.codec.EnvelopeCodec``).
        pool: a ``psycopg_pool.ConnectionPool`` on the service's database.
        kafka_config: librdkafka consumer settings; at least ``bootstrap.servers``.
            ``enable.auto.commit``/``enable.auto.offset.store`` are forced off; ``group.id``
            defaults to ``name``; ``auto.offset.reset`` defaults to ``earliest``;
            ``topic.metadata.refresh.interval.ms`` to :data:`METADATA_REFRESH_MS`;
            ``on_commit`` is the runtime's own (answers of its asynchronous offset commits).
        settings: ConsumerSettings.
        outbox: appender for follow-up events (``casestream.outbox.writer.OutboxWriter``), optional.
        dead_letters: override the dead-letter sink (default: ``KafkaDeadLetters`` on
            ``<name>.dlq`` with the same bootstrap servers).
        metrics_name: the ``consumer`` label of this runtime's metrics (default ``name``);
            the members of a :class:`~casestream.consumer.group.ConsumerGroup` report as
            ``<name>#<i>`` so that their counters and lag are not mixed up.

    Raises:
        ConfigError: auto-commit requested, no bootstrap servers, no topics, or under
            ``group_protocol="consumer"`` a setting that protocol moves to the broker
            (:data:`CONSUMER_PROTOCOL_REJECTS`), or ``group.protocol`` in ``kafka_config``
            (``ConsumerSettings.group_protocol`` chooses it).
    """

    def __init__(self, name: str, topics: Sequence[str], handlers: HandlerRegistry,
                 codec: EnvelopeDecoder, pool: Any, kafka_config: dict[str, Any],
                 settings: ConsumerSettings | None = None, *,
                 outbox: OutboxAppender | None = None,
                 dead_letters: DeadLetterSink | None = None,
                 metrics_name: str | None = None) -> None:
        if not topics:
            raise ConfigError(f"consumer {name}: no topics to consume")
        if str(kafka_config.get("enable.auto.commit", "false")).lower() == "true":
            raise ConfigError(f"consumer {name}: enable.auto.commit must be false "
                              "(offsets are committed after the database transaction)")
        if "bootstrap.servers" not in kafka_config:
            raise ConfigError(f"consumer {name}: kafka_config needs bootstrap.servers")
        self.settings = settings or ConsumerSettings()
        protocol = self.settings.group_protocol
        if "group.protocol" in kafka_config:
            raise ConfigError(f"consumer {name}: set the group protocol with "
                              "ConsumerSettings.group_protocol, not kafka_config group.protocol")
        if protocol == "consumer":
            refused = [k for k in CONSUMER_PROTOCOL_REJECTS if k in kafka_config]
            if refused:
                raise ConfigError(f"consumer {name}: {', '.join(refused)} cannot be set with "
                                  "group_protocol=consumer (the broker assigns partitions and "
                                  "times sessions: group.consumer.* broker settings)")
        self.name = name
        self._made_in = ProcessBound(f"consumer runtime {name}")
        self.dlq_topic = self.settings.dlq_topic_for(name)
        self.redrive_topic = self.settings.redrive_topic_for(name)
        self.topics = list(dict.fromkeys([*topics, self.redrive_topic]))
        self.pool = pool
        self.stats = ConsumerStats()
        self._probe = telemetry.consumer_probe(metrics_name or name, self.stats)  # /metrics
        self._conf = {
            "group.id": name,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "max.poll.interval.ms": 300000,
            "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
            "group.protocol": protocol,
            **({"session.timeout.ms": 45000} if protocol == "classic" else {}),
            **kafka_config,
            **_FORCED,
        }
        self._dead_letters = dead_letters
        self._processor_args = dict(consumer=name, handlers=handlers, decoder=codec,
                                    settings=self.settings, outbox=outbox, stats=self.stats)
        self.processor: BatchProcessor | None = None
        self._consumer: Any = None
        self._conn: Any = None
        self._executor: cf.ThreadPoolExecutor | None = None
        self._inflight: cf.Future[BatchResult] | None = None
        self._stop: threading.Event | None = None  # set: the batch in flight is awaited by _shutdown
        self._assigned: set[TP] = set()
        self._paused: dict[TP, float] = {}  # tp -> monotonic time to resume
        self._pending: dict[TP, int] = {}  # offsets processed but not yet committed
        self._infra_failures = 0
        self._next_sweep = 0.0
        self._generation = 0  # bumped on revoke/lost/replace
        # generation at which each partition was last revoked or lost: a prefetched record of it
        # from an earlier generation is stale (fetched again from the commit); the others'
        # records are kept, since an incremental revoke leaves their fetch position alone
        self._forgotten_at: dict[TP, int] = {}
        self._replaced_at = 0  # generation of the last client replacement: everything stale
        self._flight: tuple[cf.Future[BatchResult], list[Record]] | None = None
        self._commit_sent: float | None = None  # monotonic time of the unanswered async commit
        self._commit_last = -math.inf  # monotonic time the last asynchronous commit was sent
        self.ready = threading.Event()  # set once the first assignment arrived
        self._unassigned_since: float | None = None  # monotonic; None while assigned
        self.rejoin_after_s = self.settings.rejoin_timeout_s or (
            (int(self._conf["max.poll.interval.ms"])
             + int(self._conf.get("session.timeout.ms", _BROKER_SESSION_TIMEOUT_MS))) / 1000.0)
        self._phase: tuple[str, float] = ("starting", time.monotonic())  # watchdog's view
        self._stall_logged = False
        self._workers: KeyWorkers | None = None  # key-parallel mode (key_concurrency > 1)
        self._flow_paused: set[TP] = set()  # paused because the key queue is full
        self._keyed_committed: dict[TP, int] = {}  # highest offset made pending per partition
        k = self.settings.key_concurrency
        self._coroutines = handlers.awaits(self.settings.mode)
        self._handler_loop: HandlerLoop | None = None  # key-parallel coroutine handlers
        self._key_workers = worker_threads(k, self._coroutines)
        max_size = getattr(pool, "max_size", None)
        if k > 1 and isinstance(max_size, int) and max_size < self._key_workers + 1:
            raise ConfigError(f"consumer {name}: key_concurrency={k} needs a connection pool "
                              f"of max_size >= {self._key_workers + 1} (one per worker thread "
                              f"and one for the loop), the pool has max_size={max_size}")

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; then finish the batch, commit, leave the group.

        Raises:
            ForkedClientError: the runtime was made in another process (before a fork).
        """
        self._made_in.check()
        if not self._prepare(stop):
            return  # stopped while Kafka was still unreachable: nothing consumed, nothing to commit
        self._stop = stop
        self._executor = cf.ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}.batch")
        if self.settings.key_concurrency > 1:
            self._start_workers()
        self._consumer = self._new_consumer()
        log.info("%s: consuming %s (batch %d, dlq %s)", self.name, ", ".join(self.topics),
                 self.settings.batch_size, self.dlq_topic)
        done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(done,), daemon=True,
                                    name=f"{self.name}.watchdog")
        watchdog.start()
        try:
            while not stop.is_set():
                self._step()
        finally:
            try:
                self._enter("stopping")
                self._shutdown()
            finally:
                done.set()

    def _new_consumer(self) -> Any:
        """A Kafka consumer on the runtime's config, subscribed with its rebalance callbacks;
        the wait for its first assignment starts now."""
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import Consumer

        made: list[Any] = []

        def on_commit(err: Any, partitions: list[Any]) -> None:
            if made and made[0] is self._consumer:  # not the answer to a replaced client's commit
                self._on_commit(err, partitions)

        consumer = Consumer({**self._conf, "on_commit": on_commit})
        made.append(consumer)
        consumer.subscribe(self.topics, on_assign=self._on_assign,
                           on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._unassigned_since = time.monotonic()
        return consumer

    # ------------------------------------------------------------------ rejoin guard

    def rejoin_overdue(self, now: float | None = None) -> float | None:
        """Seconds this runtime has waited for an assignment, once that is
        ``rejoin_timeout_s`` or more; None while it holds an assignment or waits less."""
        since = self._unassigned_since
        if since is None:
            return None
        waited = (time.monotonic() if now is None else now) - since
        return waited if waited >= self.rejoin_after_s else None

    def _replace_consumer(self, waited: float) -> None:
        """Close the Kafka consumer and subscribe a new one (see ``rejoin_timeout_s``).

        Nothing is assigned at this point (the revoke or loss forgot every partition), so
        no offset is pending and no batch holds records; a sweep in flight is finished
        first, and if an assignment arrives while it is (the client is polled meanwhile),
        the client is kept. The old client is closed on a daemon thread, waited for at most
        ``_CLOSE_WAIT_S``: a client stuck in its group join may not close at all. Its
        late rebalance callbacks and commit answers (served on that thread) are ignored.
        librdkafka sends no JoinGroup while none of the subscribed topics exists, so such a
        runtime is replaced once per bound too."""
        self._enter("replacing the Kafka consumer")
        if self._workers is None:
            stray = self._land()  # may poll the client while it waits: an assignment can come
            if self._unassigned_since is None:
                for tp, off in stray.items():  # polled during the wait: fetch them again
                    if tp in self._assigned:
                        self._rewind(tp, off, 0.0)
                return
        self.stats.consumer_restarts += 1
        log.error("%s: no partition assignment %.0f s after subscribing or losing partitions "
                  "(rejoin_timeout_s %.0f); closing the Kafka consumer and joining group %s "
                  "with a new one", self.name, waited, self.rejoin_after_s, self._conf["group.id"])
        old, self._consumer = self._consumer, None  # its late answers and callbacks are ignored
        self._pending.clear()
        self._commit_sent = None
        self._generation += 1
        self._replaced_at = self._generation
        closer = threading.Thread(target=_close_quietly, args=(old, self.name), daemon=True,
                                  name=f"{self.name}.close")
        closer.start()
        closer.join(_CLOSE_WAIT_S)
        if closer.is_alive():
            log.warning("%s: the old Kafka consumer did not close within %.0f s; left to its "
                        "thread", self.name, _CLOSE_WAIT_S)
        self._consumer = self._new_consumer()

    # ------------------------------------------------------------------ stall watchdog

    def _enter(self, phase: str) -> None:
        self._phase = (phase, time.monotonic())

    def stalled(self) -> str | None:
        """Why the loop counts as stalled, e.g. ``"committing offsets for 131 s"``; None if
        its current phase is younger than ``ConsumerSettings.stall_after_s``."""
        phase, since = self._phase
        age = time.monotonic() - since
        if phase == "stopping" or age < self.settings.stall_after_s:
            return None
        return f"{phase} for {age:.0f} s"

    def _watch(self, done: threading.Event) -> None:
        interval = min(5.0, self.settings.stall_after_s / 4)
        reader: Any = None
        next_lag = 0.0
        try:
            while not done.wait(interval):
                self._check_stall()
                if time.monotonic() >= next_lag:
                    next_lag = time.monotonic() + LAG_READ_INTERVAL_S
                    reader = self._read_lag(reader)
        finally:
            if reader is not None:
                reader.close()

    def _read_lag(self, reader: Any) -> Any:
        """Set ``queue_lag_messages`` from Kafka: per topic, over this member's assigned
        partitions, high watermark - the group's committed offset (:mod:`casestream.kafka.lag`).

        Read by a client of its own (same ``group.id``, never subscribed) on the watchdog
        thread, so a batch stuck in a handler or a dead poll loop does not freeze the figure
        at what was fetched. Returns the reader to reuse (None after a failure)."""
        try:
            if reader is None:
                # lazy (start-up cost): confluent_kafka loads when a client is built
                from confluent_kafka import Consumer

                reader = Consumer({k: v for k, v in self._conf.items() if k != "on_commit"})
            assigned = sorted(tuple(self._assigned))
            by_topic = {t: 0.0 for t in self._probe.lag.messages}
            for part in read_partitions(reader, assigned, timeout_s=5.0):
                by_topic[part.topic] = by_topic.get(part.topic, 0.0) + part.lag
            self._probe.group_lag(by_topic)
            return reader
        except Exception as e:  # noqa: BLE001 - the figure waits for the next read
            log.debug("%s: lag read failed: %s", self.name, e)
            if reader is not None:
                reader.close()
            return None

    def _check_stall(self) -> None:
        why = self.stalled()
        if why is not None and not self._stall_logged:
            self._stall_logged = True
            self.stats.stalls += 1
            log.error("%s: consumer stalled: %s (assigned %s; paused %s); its partitions make "
                      "no progress until this step returns", self.name, why,
                      _fmt_tps(self._assigned), _fmt_tps(self._paused))
        elif why is None and self._stall_logged:
            self._stall_logged = False
            log.warning("%s: consumer stall over (now %s)", self.name, self._phase[0])

    def _prepare(self, stop: threading.Event) -> bool:
        """Build the processor, the dead-letter topics and the inbox schema; False when
        ``stop`` was set while Kafka was unreachable."""
        if self._dead_letters is None:
            self._dead_letters = KafkaDeadLetters(
                self._kafka_connection(), self.dlq_topic, self.name,
                flush_timeout_s=self.settings.dlq_flush_timeout_s)
        self.processor = BatchProcessor(dead_letters=self._dead_letters,
                                        **self._processor_args)  # type: ignore[arg-type]
        if self.settings.key_concurrency > 1:
            cache = self.processor.guard_cache
            threads = self._key_workers
            calls = self.settings.key_concurrency
            if self._handler_loop is None and self._coroutines:
                self._handler_loop = HandlerLoop(self.name, calls)
            shared = self._handler_loop
            self._workers = KeyWorkers(
                self.name, self.pool,
                lambda: BatchProcessor(dead_letters=self._dead_letters, guard_cache=cache,
                                       handler_concurrency=calls, handler_loop=shared,
                                       **self._processor_args),  # type: ignore[arg-type]
                concurrency=threads, max_unit=self.settings.batch_size,
                retry=self.settings.retry)
        if self.settings.ensure_topics and not self._ensure_dead_letter_topics(stop):
            return False
        if self.settings.ensure_schema:
            with self.pool.connection() as conn:
                ensure_schema(conn)
        return True

    def _ensure_dead_letter_topics(self, stop: threading.Event) -> bool:
        """Create the dead-letter and redrive topics, waiting while Kafka is unreachable (a
        retriable or transport error, or a timeout: a warning, then again after 1 s doubling
        up to 30 s), so a service started during a Kafka outage keeps taking commands into
        its outbox instead of exiting; its consumer check says it has no assignment yet.
        Returns False when ``stop`` is set first.

        Raises:
            KafkaException: any other error (authorization, invalid configuration).
        """
        from confluent_kafka import KafkaError, KafkaException

        unreachable = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                       KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT}
        delay_s = 1.0
        while True:
            try:
                ensure_topics(self._kafka_connection(), [self.dlq_topic, self.redrive_topic])
                return True
            except (TimeoutError, KafkaException) as e:
                err = e.args[0] if isinstance(e, KafkaException) and e.args else None
                if isinstance(e, KafkaException) and not (
                        isinstance(err, KafkaError) and (err.retriable() or err.code() in unreachable)):
                    raise
                log.warning("%s: Kafka unreachable (%s); creating topics %s, %s again in %.0f s",
                            self.name, err if err is not None else type(e).__name__,
                            self.dlq_topic, self.redrive_topic, delay_s)
            if stop.wait(delay_s):
                return False
            delay_s = min(delay_s * 2, 30.0)

    def _kafka_connection(self) -> dict[str, Any]:
        """The connection part of the consumer config (bootstrap, security, client id) for
        the dead-letter producer and the admin client: the same cluster, the same credentials."""
        return connection_config(self._conf)

    def _shutdown(self) -> None:
        abandoned = False
        try:
            if self._within_grace():
                self._land()  # finish the batch in flight and commit it; a prefetched one is dropped
            else:
                abandoned = True
        except Exception:  # noqa: BLE001
            log.exception("%s: finishing the last batch failed", self.name)
        try:
            before = dict(self._pending)
            self._commit_pending(wait=True)
            done = {tp: o for tp, o in before.items() if tp not in self._pending}
            log.info("%s: stopping; offsets committed: %s%s", self.name, _fmt_offsets(done),
                     f"; not committed (redelivered): {_fmt_offsets(self._pending)}"
                     if self._pending else "")
        finally:
            try:
                if self._consumer is not None:
                    self._leave_first(self._consumer)
                    self._consumer.close()
            finally:
                if self._workers is not None:
                    self._workers.stop()
                if self._handler_loop is not None:
                    self._handler_loop.close()
                    self._handler_loop = None
                if self._executor:
                    # An abandoned handler may never return (an external call): not waited for.
                    self._executor.shutdown(wait=not abandoned, cancel_futures=True)
                if self.processor is not None:
                    self.processor.close()
                self._release_conn()
                if isinstance(self._dead_letters, KafkaDeadLetters):
                    try:
                        self._dead_letters.flush()
                    except Exception:  # noqa: BLE001
                        log.exception("%s: dead-letter flush at shutdown failed", self.name)
                log.info("%s: stopped (%s)", self.name, self.stats)

    def _leave_first(self, consumer: Any) -> None:
        """Unsubscribe before ``close()`` under the classic protocol with the
        ``cooperative-sticky`` assignor (dynamic members only), so that the member leaves the
        group (``LeaveGroup``) even when it holds no partition.

        librdkafka (2.16) closes such a member without a ``LeaveGroup`` when its assignment
        is empty: its terminate path skips the rejoin that sends it ("consumer is
        terminating, skipping rejoin" in its ``cgrp`` debug log), so the coordinator keeps
        the member until ``session.timeout.ms`` (45 s) and the rebalance that a scale-in
        starts waits for it, every partition of the group unassigned meanwhile. Under
        cooperative-sticky a new member's first assignment is always empty and a member
        beyond the partition count stays so. An application ``unsubscribe()`` takes the
        rejoin path, which sends the ``LeaveGroup``; partitions still held are revoked
        through ``on_revoke`` as by ``close()``. A static member (``group.instance.id``) must
        not leave (KIP-345: a restart within the session timeout moves nothing)."""
        if (self._conf.get("group.protocol") != "classic"
                or "cooperative" not in str(self._conf.get("partition.assignment.strategy", ""))
                or self._conf.get("group.instance.id")):
            return
        try:
            consumer.unsubscribe()
        except Exception as e:  # noqa: BLE001 - close() still leaves in the common case
            log.warning("%s: unsubscribe before close failed: %s", self.name, e)

    def _within_grace(self) -> bool:
        """Give the batch in flight ``shutdown_grace_s`` to finish; True if it did (or failed,
        or there is none). Past the grace its database session is ended
        (``pg_terminate_backend``), so its transaction rolls back whether the handler waits on
        a lock, a statement or an external call, and nothing of it is committed later; the
        batch is logged as redelivered and False returned. Key-parallel mode: the same for
        the running units (:meth:`_keyed_within_grace`)."""
        if self._workers is not None:
            return self._keyed_within_grace(self._workers)
        fut, flight = self._inflight, self._flight
        if fut is None or flight is None:
            return True
        grace = self.settings.shutdown_grace_s
        try:
            fut.result(timeout=grace)
            return True
        except cf.TimeoutError:
            pass
        except Exception:  # noqa: BLE001 - reported by _land
            return True
        records = flight[1]
        conn = self._conn
        ended = _terminate_session(self.pool, conn) if conn is not None else False
        self._flight = self._inflight = None
        self._conn = None  # ended (or still in the handler's hands): never given back to the pool
        spans: dict[TP, list[int]] = {}
        for r in records:
            spans.setdefault(r.tp, []).append(r.offset)
        what = ", ".join(f"{t}[{p}]@{min(o)}-{max(o)}" for (t, p), o in sorted(spans.items())) or "a sweep"
        log.warning("%s: the batch in flight (%d records: %s) did not finish within "
                    "shutdown_grace_s=%.1f s; %s; not committed, redelivered to the next member",
                    self.name, len(records), what, grace,
                    "its database session was ended and its transaction rolled back" if ended
                    else "its database session could not be ended: its transaction commits "
                    "nothing once the connection closes at exit")
        return False

    def _keyed_within_grace(self, workers: KeyWorkers) -> bool:
        """Key-parallel shutdown: start no unit, give the running ones ``shutdown_grace_s``;
        True if they finished. Else their sessions are ended (``pg_terminate_backend``: each
        unit's transaction rolls back), their late outcomes ignored, the offsets of finished
        units made pending, and what is redelivered per partition logged; False."""
        grace = self.settings.shutdown_grace_s
        if workers.quiesce(grace):
            return True
        running = workers.abandon()
        self._release_conn()  # the loop's own: the spare that ends the units' sessions
        ended = [_terminate_session(self.pool, conn) for conn, _unit in running]
        self._keyed_offsets(workers)  # finished units only: a running one holds its offsets back
        spans: dict[TP, list[int]] = {}
        for _conn, unit in running:
            for entry in unit.entries:
                spans.setdefault(entry[0].tp, []).append(entry[0].offset)
        what = ", ".join(f"{t}[{p}]@{min(o)}-{max(o)}" for (t, p), o in sorted(spans.items()))
        redone = ", ".join(f"{t}[{p}]@{lo}-{hi - 1}"
                           for (t, p), (lo, hi) in sorted(workers.uncommitted().items())
                           if (t, p) in self._assigned)
        log.warning("%s: %d key-parallel units in flight (%s) did not finish within "
                    "shutdown_grace_s=%.1f s; %s; not committed; redelivered to the next member: "
                    "%s (running, queued, and applied after a running one: the inbox skips "
                    "what was applied)", self.name, len(running), what or "-", grace,
                    "their database sessions were ended and their transactions rolled back"
                    if all(ended) else f"{ended.count(False)} database sessions could not be "
                    "ended: their transactions commit nothing once the connections close at exit",
                    redone or "-")
        return False

    # ------------------------------------------------------------------ one step

    def _step(self) -> None:
        waited = self.rejoin_overdue()
        if waited is not None:
            self._replace_consumer(waited)
        if self._workers is not None:
            self._step_keyed(self._workers)
            return
        self._resume_due()
        self._enter("polling")
        msgs = fetch_batch(self._consumer, self.settings.batch_size, self.settings.poll_timeout_s)
        generation = self._generation
        records = self._records(msgs)
        self._probe.polled(records, self._consumer)
        decoded = self.processor.decode(records) if records else None  # type: ignore[union-attr]
        self._enter("waiting for the batch in the database")
        stray = self._land()  # batch N: wait, commit offsets, rewind cut partitions
        if self._flight is not None:
            return  # stopping while batch N still runs: _shutdown gives it the grace
        self._enter("handing over the next batch")
        if decoded is not None:
            if self._replaced_at > generation:
                decoded = None  # fetched by a replaced client: fetched again from the commit
            else:
                # a partition revoked (or lost) meanwhile is fetched again from its commit if it
                # comes back; partitions kept by an incremental revoke keep their records
                decoded = decoded.without(
                    lambda r: r.tp in self._paused or r.tp not in self._assigned
                    or self._forgotten_at.get(r.tp, -1) > generation)
                if not decoded:
                    decoded = None
        # Messages delivered while everything was paused (after this prefetched batch, or of a
        # partition assigned meanwhile): fetch them again, after the prefetched batch is kept.
        for tp, off in stray.items():
            if tp in self._assigned:
                self._rewind(tp, off, 0.0)
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if decoded is not None or sweep:
            if sweep:
                self._next_sweep = now + self.settings.sweep_interval_s
            batch = decoded.records if decoded is not None else []
            fut = self._executor.submit(self._work, decoded, sweep)  # type: ignore[union-attr]
            self._probe.started(len(batch))
            self._inflight = fut
            self._flight = (fut, batch)
        # Batch N's offsets: its transaction has committed; committing them while batch N+1
        # is in the database keeps the worker busy (order is kept: one commit at a time).
        self._enter("committing offsets")
        self._commit_pending()

    def _land(self) -> dict[TP, int]:
        """Wait for the batch in flight (if any) and apply its outcome to offsets.

        Returns the first offsets of messages that arrived while waiting (to seek back to).
        """
        if self._workers is not None:
            self._workers.quiesce()
            self._keyed_offsets(self._workers)
            return {}
        if self._flight is None:
            return {}
        fut, records = self._flight
        stray = self._await(fut)
        if not fut.done():
            return stray  # stopping: _shutdown gives it shutdown_grace_s
        self._flight = None
        self._inflight = None
        self._probe.finished()
        try:
            result = fut.result()
        except Exception as e:  # noqa: BLE001 - batch-level failure
            self._batch_failed(records, e)
            failed = {r.tp for r in records}  # rewound to the batch's first offsets: earlier
            return {tp: off for tp, off in stray.items() if tp not in failed}
        self._infra_failures = 0
        self._finish(result)
        return {tp: off for tp, off in stray.items() if tp not in result.rewinds}

    def _records(self, msgs: list[Any]) -> list[Record]:
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import KafkaError

        out: list[Record] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                # librdkafka hands a fatal error to consume() as code _FATAL (the original code
                # is only in its text), and that message error's fatal() is False
                if err.fatal() or err.code() == KafkaError._FATAL:
                    if err.code() == KafkaError._FENCED or "fenced" in err.str().lower():
                        raise ConsumerFenced(
                            f"{self.name}: fenced from group {self._conf['group.id']}: another "
                            f"member uses group.instance.id "
                            f"{self._conf.get('group.instance.id')!r} (two instances were given "
                            "the same identity); this one stops")
                    raise RuntimeError(f"{self.name}: fatal consumer error: {err}")
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and m.topic():
                    log.warning("%s: topic %s does not exist (yet); consuming it once it is "
                                "created (checked every %s ms, topic.metadata.refresh.interval.ms)",
                                self.name, m.topic(), self._conf["topic.metadata.refresh.interval.ms"])
                    continue
                log.warning("%s: consumer error: %s", self.name, err)
                continue
            tp = (m.topic(), m.partition())
            if tp in self._paused:
                continue  # fetched before the pause took effect; the seek brings it back
            out.append(record_from_message(m))
        return out

    def _work(self, decoded: Decoded | None, sweep: bool) -> BatchResult:
        conn = self._connection()
        try:
            if decoded is None:
                self.processor.sweep(conn)  # type: ignore[union-attr]
                return BatchResult()
            return self.processor.process(conn, decoded, sweep=sweep)  # type: ignore[union-attr]
        except Exception:
            if connection_broken(conn):
                self._release_conn()
            raise

    def _await(self, fut: cf.Future[BatchResult]) -> dict[TP, int]:
        """Wait for the batch; past ``heartbeat_after_s`` pause everything and keep polling.

        Returns offsets of messages that arrived while waiting (to seek back to).
        """
        until = time.monotonic() + self.settings.heartbeat_after_s
        while True:
            try:
                # in slices: a stop is seen at once, so shutdown_grace_s counts from it
                fut.result(timeout=min(0.2, max(0.0, until - time.monotonic())))
                return {}
            except cf.TimeoutError:
                if self._stop is not None and self._stop.is_set():
                    return {}
                if time.monotonic() >= until:
                    break
            except Exception:  # noqa: BLE001 - reported by the caller
                return {}
        held = [tp for tp in self._assigned if tp not in self._paused]
        self._pause(held)
        log.info("%s: batch running long; partitions paused, polling to stay in the group",
                 self.name)
        stray: dict[TP, int] = {}
        try:
            while not fut.done() and not (self._stop is not None and self._stop.is_set()):
                msg = self._consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    tp = (msg.topic(), msg.partition())
                    stray[tp] = min(stray.get(tp, msg.offset()), msg.offset())
        finally:
            self._resume([tp for tp in held if tp in self._assigned and tp not in self._paused])
        return stray

    def _finish(self, result: BatchResult) -> None:
        for tp, off in result.commits.items():
            if tp in self._assigned:
                self._pending[tp] = off
        for tp, (off, delay) in result.rewinds.items():
            if tp in self._assigned:
                self._rewind(tp, off, delay)

    def _batch_failed(self, records: list[Record], e: BaseException) -> None:
        self._infra_failures += 1
        self.stats.infra_failures += 1
        delay = self.settings.retry.delay(min(self._infra_failures, 30))
        log.error("%s: batch of %d failed (%s: %s); rolled back, retrying in %.2f s",
                  self.name, len(records), type(e).__name__, e, delay)
        first: dict[TP, int] = {}
        for r in records:
            if r.tp not in first:
                first[r.tp] = r.offset
        for tp, off in first.items():
            if tp in self._assigned:
                self._rewind(tp, off, delay)
        if not records:  # a failed sweep: back off before the next one
            self._next_sweep = time.monotonic() + delay

    # ------------------------------------------------------------------ key-parallel mode

    def _start_workers(self) -> None:
        assert self._workers is not None
        self._workers.start()
        log.info("%s: key-parallel, %d calls at once on %d worker threads", self.name,
                 self.settings.key_concurrency, self._key_workers)

    def _step_keyed(self, workers: KeyWorkers) -> None:
        """One loop step of key-parallel mode: flow control, fetch, queue, seek, sweep, commit."""
        if workers.crashed is not None:
            raise RuntimeError(f"{self.name}: a key worker thread failed: "
                               f"{workers.crashed!r}") from workers.crashed
        self._resume_due()
        s = self.settings
        limit = key_queue_limit(s.batch_size, s.key_concurrency)
        queued = workers.queued
        full = queued >= limit
        self._flow(queued, limit)
        self._enter("polling")
        # Full: one record at most per step, which serves the rebalance and commit callbacks
        # without pausing (a pause purges librdkafka's prefetched records: key_queue_flow).
        msgs = fetch_batch(self._consumer, 1 if full else s.batch_size,
                           0.0 if full else s.poll_timeout_s)
        records = [r for r in self._records(msgs) if r.tp in self._assigned]
        self._probe.polled(records, self._consumer)
        # Decoded and queued in slices with a GIL hand-over between them: a whole batch holds
        # the GIL for milliseconds (CPython forces a switch only after sys.getswitchinterval(),
        # 5 ms), which the worker threads and the handler loop would wait out per event.
        for i in range(0, len(records), KEY_DECODE_SLICE):
            workers.add(self.processor.decode(records[i:i + KEY_DECODE_SLICE]).entries)  # type: ignore[union-attr]
            time.sleep(0)
        self._enter("handing over the next batch")
        for tp, (off, delay) in workers.rewinds().items():
            if tp in self._assigned:
                self._rewind(tp, off, delay)
        self._keyed_sweep()
        self._keyed_offsets(workers)
        self._enter("committing offsets")
        self._commit_pending()
        if full:
            self._enter("waiting for the key queue")
            workers.wait_room(limit, 0.02)

    def _flow(self, queued: int, limit: int) -> None:
        """Pause or resume the fetching partitions as :func:`key_queue_flow` says for a key
        queue of ``queued`` entries."""
        step = key_queue_flow(queued, limit, bool(self._flow_paused))
        if step is FlowStep.PAUSE:
            self._flow_paused = {tp for tp in self._assigned if tp not in self._paused}
            self._pause(list(self._flow_paused))
            self.stats.flow_pauses += 1
        elif step is FlowStep.RESUME:
            back = [tp for tp in self._flow_paused if tp in self._assigned and tp not in self._paused]
            self._flow_paused = set()
            self._resume(back)

    def _keyed_sweep(self) -> None:
        """When due, sweep held/parked aggregates on the loop's connection while units run:
        the sweep locks the guard rows it works on ``FOR UPDATE SKIP LOCKED`` and a unit
        advances a guard row only from the version it read (``GuardConflict`` otherwise, a
        retryable failure), as between the members of a group."""
        if time.monotonic() < self._next_sweep:
            return
        self._enter("sweeping held aggregates")
        try:
            self._work(None, True)
            self._next_sweep = time.monotonic() + self.settings.sweep_interval_s
        except Exception as e:  # noqa: BLE001 - retried after a backoff
            self._infra_failures += 1
            delay = self.settings.retry.delay(min(self._infra_failures, 30))
            log.error("%s: sweep failed (%s: %s); retrying in %.2f s", self.name,
                      type(e).__name__, e, delay)
            self._next_sweep = time.monotonic() + delay
        else:
            self._infra_failures = 0

    def _keyed_offsets(self, workers: KeyWorkers) -> None:
        """Make the committable offsets of assigned partitions pending where they moved."""
        for tp, off in workers.committable().items():
            if tp in self._assigned and off > self._keyed_committed.get(tp, -1):
                self._keyed_committed[tp] = off
                self._pending[tp] = off

    # ------------------------------------------------------------------ offsets

    def _commit_pending(self, *, wait: bool = False) -> None:
        """Commit the offsets of applied batches; ``wait``: synchronously (revoke, shutdown).

        In the loop the commit is asynchronous, one at a time: a synchronous commit waits for
        the coordinator without a time limit (librdkafka ``rd_kafka_commit`` waits for its
        reply with ``RD_POLL_INFINITE``), so during a broker outage it would hold the loop —
        no ``consume``, no rebalance callbacks — for the whole outage. The answer arrives in
        :meth:`_on_commit` from a later ``consume``; a commit unanswered for
        ``_COMMIT_RESEND_S`` is sent again (offsets are absolute, a repeat is harmless). An
        asynchronous commit is sent at most every ``settings.commit_interval_s``.
        """
        if not self._pending or self._consumer is None:
            return
        if (not wait and self._commit_sent is not None
                and time.monotonic() - self._commit_sent < _COMMIT_RESEND_S):
            return  # one in flight; what is pending goes with the next one
        if not wait and time.monotonic() - self._commit_last < self.settings.commit_interval_s:
            return  # the loop calls again at least every poll_timeout_s
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import KafkaException, TopicPartition

        offsets = [TopicPartition(t, p, o) for (t, p), o in self._pending.items()]
        try:
            if not wait:
                self._consumer.commit(offsets=offsets, asynchronous=True)
                self._commit_sent = self._commit_last = time.monotonic()
                return
            committed = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self._commit_failed(e)
            return
        self._committed(committed)

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        """librdkafka ``offset_commit_cb`` of an asynchronous commit (served by ``consume``)."""
        self._commit_sent = None
        if err is not None:
            self._commit_last = -math.inf  # the offsets are sent again at the next step
            self._commit_failed(err)
            return
        self._committed(partitions)

    def _committed(self, partitions: list[Any] | None) -> None:
        for tp in partitions or ():
            key = (tp.topic, tp.partition)
            if tp.error is None and self._pending.get(key) == tp.offset:
                del self._pending[key]
        self.stats.offset_commits += 1

    def _commit_failed(self, e: Any) -> None:
        self.stats.offset_commit_failures += 1
        log.warning("%s: offset commit failed (%s); will retry, redelivery is deduplicated",
                    self.name, e)

    # ------------------------------------------------------------------ pause / seek

    def _rewind(self, tp: TP, offset: int, delay: float) -> None:
        """Pause ``tp``, seek it to ``offset`` (pause first: librdkafka resumes from the seek)."""
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import TopicPartition

        self._pause([tp])
        self._paused[tp] = time.monotonic() + delay
        try:
            self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
        except Exception as e:  # noqa: BLE001 - e.g. partition just revoked
            log.warning("%s: seek %s[%d] to %d failed: %s", self.name, tp[0], tp[1], offset, e)

    def _pause(self, tps: list[TP]) -> None:
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import TopicPartition

        if tps:
            try:
                self._consumer.pause([TopicPartition(t, p) for t, p in tps])
            except Exception as e:  # noqa: BLE001
                log.warning("%s: pause failed: %s", self.name, e)

    def _resume(self, tps: list[TP]) -> None:
        # lazy (start-up cost): confluent_kafka loads when a client is built
        from confluent_kafka import TopicPartition

        if tps:
            try:
                self._consumer.resume([TopicPartition(t, p) for t, p in tps])
            except Exception as e:  # noqa: BLE001
                log.warning("%s: resume failed: %s", self.name, e)

    def _resume_due(self) -> None:
        if not self._paused:
            return
        now = time.monotonic()
        due = [tp for tp, at in self._paused.items() if at <= now]
        for tp in due:
            del self._paused[tp]
        self._resume([tp for tp in due if tp in self._assigned])

    # ------------------------------------------------------------------ rebalance callbacks

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if consumer is not self._consumer:
            return  # a replaced client, closing
        self._unassigned_since = None
        given = {(p.topic, p.partition) for p in partitions}
        self._assigned |= given
        self.stats.assignments += 1
        self.stats.partitions_assigned = len(self._assigned)
        log.info("%s: assigned %s", self.name, _fmt(partitions))
        self._commit_start_positions(consumer, partitions)
        # A pause from before a revoke survives in librdkafka: nothing assigned now is paused
        # by a current decision of ours (the revoke forgot them), so fetch them all.
        self._resume([tp for tp in given if tp not in self._paused])
        self.ready.set()

    def _commit_start_positions(self, consumer: Any, partitions: list[Any]) -> None:
        """Commit the start position (``auto.offset.reset=earliest``: the first retained
        offset) of every assigned partition the group has no committed offset on yet.

        Without it a group that stops before its first commit is invisible to every lag
        reader (Kafka's ``OffsetFetch`` answers "no offset", the alert cannot fire); with it
        the whole retained log counts as lag until the group moves on. Best effort: a failure
        is logged and consumption goes on (the start position is the same either way)."""
        if str(self._conf.get("auto.offset.reset", "earliest")).lower() not in ("earliest",
                                                                             "smallest",
                                                                             "beginning"):
            return  # latest: the group starts at the end, nothing is behind
        try:
            # lazy (start-up cost): confluent_kafka loads when a client is built
            from confluent_kafka import TopicPartition

            fresh = [TopicPartition(p.topic, p.partition)
                     for p in consumer.committed(partitions, timeout=10.0) if p.offset < 0]
            if not fresh:
                return
            # timestamp 0 looks up the earliest retained offset of each partition in one request
            starts = consumer.offsets_for_times(
                [TopicPartition(p.topic, p.partition, 0) for p in fresh], timeout=10.0)
            offsets = []
            for p in starts:
                start = p.offset
                if p.error is None and start < 0:  # an empty partition: it starts at its end
                    start = consumer.get_watermark_offsets(
                        TopicPartition(p.topic, p.partition), timeout=10.0)[0]
                if p.error is None and start >= 0:
                    offsets.append(TopicPartition(p.topic, p.partition, start))
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
                log.info("%s: committed start positions %s", self.name, _fmt(offsets))
        except Exception as e:  # noqa: BLE001 - lag visibility only; consumption is unaffected
            log.warning("%s: could not commit start positions (%s)", self.name, e)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        if not self._losing(consumer, revoked):
            return
        self.stats.revocations += 1
        self._generation += 1
        log.info("%s: revoked %s", self.name, _fmt(partitions))
        phase = self._phase
        self._enter("revoking partitions (finishing the batch, committing offsets)")
        self._drain_inflight(commit=True)
        self._commit_pending(wait=True)  # the next owner starts from these offsets
        self._forget(revoked)
        self._phase = phase

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        if not self._losing(consumer, lost):
            return
        self._generation += 1
        log.warning("%s: partitions lost %s (not committing)", self.name, _fmt(partitions))
        phase = self._phase
        self._enter("losing partitions (finishing the batch)")
        self._drain_inflight(commit=False)
        self._forget(lost)
        self._phase = phase

    def _losing(self, consumer: Any, tps: set[TP]) -> bool:
        """False for a replaced client's callback; else, when ``tps`` is all the runtime
        holds, start the wait for the next assignment (unless one is running: a revoke
        during it does not restart the clock). An incremental revoke that leaves partitions
        assigned starts no wait: the member is in the group and fetching."""
        if consumer is not self._consumer:
            return False
        if self._unassigned_since is None and not (self._assigned - tps):
            self._unassigned_since = time.monotonic()
        return True

    def _drain_inflight(self, *, commit: bool) -> None:
        if self._workers is not None:
            if self._workers.abandoned:
                return  # stopping past the grace: the offsets were settled by _shutdown
            self._workers.quiesce()  # released by _forget
            if commit:
                self._keyed_offsets(self._workers)
            return
        fut = self._inflight
        if fut is None:
            return
        try:
            result = fut.result()
        except Exception:  # noqa: BLE001 - the main loop handles the failure
            return
        if commit:
            for tp, off in result.commits.items():
                if tp in self._assigned:
                    self._pending[tp] = off

    def _forget(self, tps: set[TP]) -> None:
        """Drop ``tps`` (revoked or lost); their backoff pauses are lifted in librdkafka too,
        the backoff itself stays due in ``consumer_retry`` for whoever gets them next."""
        self._resume([tp for tp in tps if tp in self._paused])
        self._assigned -= tps
        self.stats.partitions_assigned = len(self._assigned)
        for tp in tps:
            self._forgotten_at[tp] = self._generation
            self._paused.pop(tp, None)
            self._pending.pop(tp, None)
            self._keyed_committed.pop(tp, None)
        if self.processor is not None:
            self.processor.forget(list(tps))
        if self._workers is not None:
            self._flow_paused -= tps
            self._workers.forget(tps)
            self._workers.release()

    # ------------------------------------------------------------------ database connection

    def _connection(self) -> Any:
        if self._conn is None or connection_broken(self._conn):
            self._release_conn()
            conn = self.pool.getconn()
            conn.autocommit = True  # transactions are explicit (conn.transaction())
            self._conn = conn
        return self._conn

    def _release_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            give_back(self.pool, conn)


def _terminate_session(pool: Any, conn: Any) -> bool:
    """End ``conn``'s server session from another pooled connection (``pg_terminate_backend``:
    the backend aborts its transaction and exits, also while it waits on a lock); True if done."""
    try:
        pid = conn.info.backend_pid
        other = pool.getconn(timeout=2.0)
    except Exception:  # noqa: BLE001 - no spare connection: the caller reports it
        return False
    try:
        other.autocommit = True
        row = other.execute("SELECT pg_terminate_backend(%s, 2000)", (pid,)).fetchone()
        return bool(row and row[0])
    except Exception:  # noqa: BLE001
        return False
    finally:
        give_back(pool, other)


def _fmt_offsets(pending: dict[TP, int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(pending.items())) or "none"


def _close_quietly(consumer: Any, name: str) -> None:
    try:
        consumer.close()
    except Exception as e:  # noqa: BLE001 - the client is being dropped anyway
        log.warning("%s: closing the replaced Kafka consumer failed: %s", name, e)


def ensure_topics(bootstrap: KafkaTarget, topics: Sequence[str], *, partitions: int = 1,
                  timeout_s: float = 15.0, admin: Any = None) -> None:
    """Create ``topics`` if missing (broker default replication factor), then wait up to
    ``timeout_s`` until the cluster's metadata lists each of them with its partitions. Idempotent.

    The wait matters to a consumer that subscribes next: librdkafka assigns a subscribed topic
    only once its metadata lists it, and looks again only every
    ``topic.metadata.refresh.interval.ms`` (:data:`METADATA_REFRESH_MS` in the runtime), so a
    topic the group's leader did not see at the join would wait that long. A topic still not listed
    after ``timeout_s`` is logged (warning), not raised: the consumer's other topics need not wait.

    Raises:
        KafkaException: creation failed (other than ``TOPIC_ALREADY_EXISTS``).
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = admin if admin is not None else AdminClient(client_config(bootstrap))
    deadline = time.monotonic() + timeout_s
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions) for t in topics],
                                  operation_timeout=timeout_s, request_timeout=timeout_s)
    for topic, f in futures.items():
        try:
            f.result(timeout=timeout_s)
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise
    waiting = list(topics)
    while True:
        try:  # one topic per request: a cluster's whole metadata may be large
            waiting = [t for t in waiting if not _listed(admin.list_topics(
                topic=t, timeout=max(0.1, deadline - time.monotonic())).topics.get(t))]
        except KafkaException as e:
            log.debug("metadata of %s not read yet: %s", ", ".join(waiting), e)
        if not waiting:
            return
        if time.monotonic() >= deadline:
            log.warning("topics %s not listed in the cluster's metadata %g s after their creation; "
                        "a consumer subscribing now may take up to topic.metadata.refresh.interval.ms "
                        "to be assigned them", ", ".join(waiting), timeout_s)
            return
        time.sleep(0.1)


def _listed(meta: Any) -> bool:
    """Whether topic metadata lists the topic with its partitions (no topic-level error)."""
    return meta is not None and meta.error is None and bool(meta.partitions)


def _fmt(partitions: list[Any]) -> str:
    return ", ".join(f"{p.topic}[{p.partition}]" for p in partitions) or "-"


def _fmt_tps(tps: Any) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(tps)) or "-"
