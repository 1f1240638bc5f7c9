"""The replay engine: plan, rebuild into shadow tables, swap and hand over (Kafka + PostgreSQL).

Phases of :meth:`Replayer.run`:

1. **start or resume** — an unfinished run of the projection with the same ``--from``/``--to``
   and its shadow tables present is resumed from its checkpoint (offsets + guard state);
   otherwise the shadow tables are (re)created empty and a new run recorded, in one
   transaction. Live tables are never written before phase 3.
2. **rebuild** — read batches from the checkpoint offsets; each batch is one transaction:
   projection rows into the shadow tables + checkpoint offsets + changed guard rows. Killed at
   any point, the shadow and checkpoint agree (rerun resumes) and the live tables are untouched.
   The shadow tables' secondary (non-unique) indexes are dropped when they are created and
   built once after this phase (``checkpoint.defer_indexes`` / ``restore_indexes``).
3. **swap and hand over** (``--to now`` only), once the lag is zero — one transaction:
   ``LOCK`` the live tables ``ACCESS EXCLUSIVE`` (waits for the live consumer's in-flight batch;
   its later batches wait for us), snapshot the high watermarks, apply every remaining event
   below them into the shadow tables, rename shadow → live, drop the old tables, delete the
   checkpoint, COMMIT. Every event the live consumer had applied lies below the snapshot, so
   the new tables contain it (no loss); events the replay applied beyond the live consumer's
   position are re-read by the live consumer after the swap and change nothing, because
   projection writes are idempotent per event (``casestream.handlers.projection``), so none is
   applied twice. Events produced after the snapshot are applied by the live consumer only.

REPLAY mode: only ``PROJECTION`` handlers run, with a discarding outbox; poison messages are
counted and skipped (the live consumer dead-lettered them), never produced anywhere.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import gc
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg import sql

from casestream.errors import PoisonMessageError
from casestream.handlers.guard import FirstSeenPolicy
from casestream.replay import checkpoint, history, names
from casestream.replay.checkpoint import fast_commits
from casestream.replay.applier import Planned, ReplayApplier
from casestream.replay.errors import PartialReplayRefused, ReplayConfigError, ReplayError
from casestream.replay.lease import ReplayLease
from casestream.replay.parallel import applied_so_far, run_workers
from casestream.replay.positions import EndSpec, StartSpec
from casestream.replay.progress import Progress, ProgressReporter
from casestream.handlers.projection import ProjectionSpec
from casestream.replay.projection import replay_handlers
from casestream.replay.source import TP, KafkaSource
from casestream.kafka.config import KafkaTarget

log = logging.getLogger("casestream.replay")

#: Generation-0 threshold of the cyclic garbage collector while a rebuild runs (default 700).
GC_GEN0_THRESHOLD = 50_000


@contextlib.contextmanager
def relaxed_gc(gen0: int = GC_GEN0_THRESHOLD) -> Iterator[None]:
    """Run the block with the cyclic GC's generation-0 threshold raised to ``gen0`` allocations.

    A rebuild allocates ~10 container objects per event (records, payload dicts, envelopes,
    rows) and frees nearly all of them by reference counting within a batch; with the default
    threshold (700) a young collection ran every ~70 events, each scanning the live objects
    of the batches in flight; raising it gained 15-25 % throughput in A/B runs
    (bench/README.md, "Replay"). Nothing is switched off: collections still run, ~70x less
    often. The previous thresholds are restored
    on exit (also on error). Process-wide, like every ``gc`` setting: meant for the replay CLI.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _CatchUpTimeout(ReplayError):
    """The locked catch-up did not reach the high watermarks in time (swap rolled back)."""


_LOCK_RETRY = (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected,
               psycopg.errors.SerializationFailure, _CatchUpTimeout)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """Options of one replay (see ``casestream replay --help``)."""

    start: StartSpec = field(default_factory=StartSpec)
    end: EndSpec = field(default_factory=EndSpec)
    batch_size: int = 2000
    restart: bool = False
    poll_timeout_s: float = 0.5
    lock_timeout_s: float = 10.0
    catch_up_timeout_s: float = 30.0
    swap_attempts: int = 5
    workers: int = 1
    merge: bool = False
    only_range: bool = False

    def __post_init__(self) -> None:
        if self.merge and self.only_range:
            raise ReplayConfigError("--merge and --only-range exclude each other")
        if self.batch_size < 1:
            raise ReplayConfigError("--batch-size must be >= 1")
        if self.workers < 1:
            raise ReplayConfigError("--workers must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlan:
    """What a replay reads from one partition: offsets ``[start, end)``; ``first`` is where
    the range begins (``start`` is later when a run resumes from its checkpoint)."""

    topic: str
    partition: int
    low: int
    high: int
    start: int
    end: int
    first: int = 0

    @property
    def count(self) -> int:
        """Messages in range (an upper bound of events: duplicates included)."""
        return max(0, self.end - self.start)


class Mode:
    """What a replay does with the live tables (``Plan.mode``)."""

    REBUILD = "rebuild"        # whole history (every partition from offset 0), then swap
    MERGE = "merge"            # the range applied over a copy of the live tables, then swap
    ONLY_RANGE = "only-range"  # the range alone replaces the live tables (asked for)
    BUILD_ONLY = "build-only"  # --to <time>: shadow tables built, never swapped
    REFUSE = "refuse"          # part of the history and neither --merge nor --only-range


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The dry-run answer: partitions, offset ranges, message count, resume or not, and the
    mode (:class:`Mode`)."""

    projection: str
    partitions: tuple[PartitionPlan, ...]
    resume: bool
    mode: str = Mode.REBUILD

    @property
    def count(self) -> int:
        """Messages to read in total."""
        return sum(p.count for p in self.partitions)

    @property
    def partial(self) -> bool:
        """True if some partition is not read from offset 0: a later ``--from``, or history
        removed by the topic's retention (low watermark above 0)."""
        return any(p.first > 0 for p in self.partitions)

    def refusal(self) -> str:
        """The one-line reason a :data:`Mode.REFUSE` replay does not run."""
        gone = [f"{p.topic}[{p.partition}]" for p in self.partitions if p.low > 0 and p.first == p.low]
        why = (f"the history of {', '.join(gone)} starts after offset 0 (topic retention)"
               if gone else "--from starts after the beginning of the history")
        return (f"replay {self.projection}: {why}, so a swap would leave the live projection "
                f"with only that range; add --merge to apply the range over the live tables, or "
                f"--only-range to replace them by the range")

    def lines(self) -> list[str]:
        """Human-readable plan."""
        out = [f"projection {self.projection}: {'resume' if self.resume else 'new run'}, "
               f"{self.count} events to read"]
        out += [f"  {p.topic}[{p.partition}] offsets {p.start}..{p.end} ({p.count} events; "
                f"watermarks {p.low}..{p.high})" for p in self.partitions]
        out.append("  mode: " + {
            Mode.REBUILD: "rebuild from the whole history, then swap into the live tables",
            Mode.MERGE: "merge: the range is applied over a copy of the live tables, then swapped "
                        "in (rows of events before the range are kept)",
            Mode.ONLY_RANGE: "only-range: the live tables are replaced by the range alone "
                             "(rows of events before the range are dropped)",
            Mode.BUILD_ONLY: "build only (--to a time): shadow tables, not swapped",
            Mode.REFUSE: "refused: " + self.refusal(),
        }[self.mode])
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """Outcome of :meth:`Replayer.run`."""

    projection: str
    resumed: bool
    swapped: bool
    read: int
    applied: int
    stale: int
    gaps: int
    poison: int
    discarded_outbox: int
    elapsed_s: float
    tables: tuple[str, ...]

    @property
    def rate(self) -> float:
        """Events read per second."""
        return self.read / self.elapsed_s if self.elapsed_s > 0 else 0.0


class Replayer:
    """Rebuilds one projection.

    Args:
        spec: the projection.
        codec: ``casestream.events.codec.EnvelopeCodec`` (prepared; upcasts to newest).
        dsn: database of the projection's tables.
        bootstrap: Kafka ``bootstrap.servers``.
        event_types: event types to register handlers for (the catalog's).
        reporter: progress output (None: no progress lines).
        kafka_config: extra consumer settings.
    """

    def __init__(self, spec: ProjectionSpec, *, codec: Any, dsn: str, bootstrap: KafkaTarget,
                 event_types: Iterable[str], reporter: ProgressReporter | None = None,
                 kafka_config: dict[str, Any] | None = None) -> None:
        self.spec = spec
        self.codec = codec
        self.dsn = dsn
        self.bootstrap = bootstrap
        self.reporter = reporter
        self.kafka_config = kafka_config
        self.shadow = spec.shadow_names()
        self.handlers = replay_handlers(spec.registry(self.shadow, tuple(event_types)), spec.name)
        self.progress = Progress()
        self._history_id: str | None = None  # this run's replay_history row, once recorded
        self._history_at = 0.0  # monotonic time of its last progress update
        self._lease: ReplayLease | None = None  # one replay per projection and database

    # ------------------------------------------------------------------ plan

    def plan(self, options: ReplayOptions) -> Plan:
        """What :meth:`run` would read (no writes). Raises ReplayError if Kafka/PG fail."""
        source = self._source()
        try:
            with psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None) as conn:
                resume, positions, _ = self._resume_state(conn, options)
            return self._plan(source, options, resume, positions)
        finally:
            source.close()

    def _plan(self, source: KafkaSource, options: ReplayOptions, resume: bool,
              resumed: dict[TP, int] | None) -> Plan:
        tps = source.partitions()
        marks = source.watermarks_of(tps)
        start = self._start_offsets(source, tps, marks, options.start)
        first = dict(start)
        if resumed:
            start.update({tp: o for tp, o in resumed.items() if tp in start})
        if options.end.until is not None:
            end = source.offsets_for_time(tps, options.end.until + timedelta(milliseconds=1))
        else:
            end = {tp: marks[tp][1] for tp in tps}
        parts = tuple(PartitionPlan(topic=t, partition=p, low=marks[(t, p)][0],
                                    high=marks[(t, p)][1], start=start[(t, p)],
                                    end=max(end[(t, p)], start[(t, p)]), first=first[(t, p)])
                      for t, p in tps)
        plan = Plan(projection=self.spec.name, partitions=parts, resume=resume)
        return dataclasses.replace(plan, mode=self._mode(plan, options))

    @staticmethod
    def _mode(plan: Plan, options: ReplayOptions) -> str:
        if not options.end.now:
            return Mode.BUILD_ONLY
        if not plan.partial:
            return Mode.REBUILD
        if options.merge:
            return Mode.MERGE
        return Mode.ONLY_RANGE if options.only_range else Mode.REFUSE

    def _merge_starts(self, source: KafkaSource, plan: Plan) -> dict[TP, int]:
        """Start offsets of a merge: the range's, moved back to the live consumer's committed
        offset where that is earlier. The copy of the live tables is taken after these are
        read, so every event the live consumer applies after the copy lies at or after them."""
        committed = source.committed(self.spec.live_consumer,
                                     [(q.topic, q.partition) for q in plan.partitions])
        out = {}
        for q in plan.partitions:
            c = committed.get((q.topic, q.partition))
            out[(q.topic, q.partition)] = q.low if c is None else max(q.low, min(q.start, c))
        return out

    @staticmethod
    def _start_offsets(source: KafkaSource, tps: list[TP], marks: dict[TP, tuple[int, int]],
                       start: StartSpec) -> dict[TP, int]:
        if start.at is not None:
            return source.offsets_for_time(tps, start.at)
        out = {tp: marks[tp][0] for tp in tps}
        for tp, o in start.offsets.items():
            if tp not in out:
                raise ReplayConfigError(f"--from: {tp[0]}:{tp[1]} is not a partition of the topics")
            out[tp] = max(o, marks[tp][0])
        return out

    # ------------------------------------------------------------------ run

    def run(self, options: ReplayOptions) -> ReplayResult:
        """Rebuild (resuming if possible); swap and hand over when ``options.end`` is now.

        The run is recorded in ``replay_history`` (``casestream.replay.history``): running
        while it rebuilds, then finished, or failed with the error's first line.

        Raises:
            ReplayConfigError: bad options. ReplayHandlerError: a handler failed (checkpoint
            intact). ReplayError: Kafka/registry trouble, or the live tables stayed locked.
        """
        self._history_id = None
        try:
            try:
                return self._run(options)
            except psycopg.Error as e:
                raise ReplayError(f"replay {self.spec.name}: database error "
                                  f"({type(e).__name__}: {e}); live tables untouched unless the "
                                  f"swap committed, rerun resumes from the checkpoint") from e
        except BaseException as e:
            self._record_failure(e)
            raise

    def _record_failure(self, error: BaseException) -> None:
        """Mark this run's history row failed, on a connection of its own (the run's may be
        broken); a database that cannot be reached leaves the row 'running' (logged)."""
        if self._history_id is None:
            return
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        p = self.progress
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5, prepare_threshold=None) as conn:
                history.end(conn, self._history_id, "failed", p.read, p.applied, p.lag, text)
        except psycopg.Error as e:
            log.warning("replay %s: could not record the failed run: %s", self.spec.name, e)

    def _run(self, options: ReplayOptions) -> ReplayResult:
        t0 = time.monotonic()
        p = self.progress = Progress(started=t0)
        source = self._source()
        lease = self._lease = ReplayLease(self.dsn, self.spec.name)
        lease.acquire()
        released = False
        try:
            with psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None) as conn:
                checkpoint.ensure_schema(conn)
                with conn.transaction():
                    self.spec.create_tables(conn, self.spec.live_names())
                resume, resumed, guard = self._resume_state(conn, options)
                plan = self._plan(source, options, resume, resumed)
                if plan.mode == Mode.REFUSE:
                    raise PartialReplayRefused(plan.refusal())
                if not resume:
                    if plan.mode == Mode.MERGE:
                        starts = self._merge_starts(source, plan)
                        plan = dataclasses.replace(plan, partitions=tuple(
                            dataclasses.replace(q, start=starts[(q.topic, q.partition)],
                                                first=starts[(q.topic, q.partition)])
                            for q in plan.partitions))
                    self._start_run(conn, options, merge=plan.mode == Mode.MERGE)
                    guard = {}
                run_id = str(uuid.uuid4())
                history.begin(conn, run_id, self.spec.name, plan.mode, plan.count)
                self._history_id, self._history_at = run_id, time.monotonic()
                # Strict first-seen (version 1 first) only over the whole history: after a
                # later --from or retention the first event of an aggregate sets its baseline.
                applier = ReplayApplier(
                    consumer=f"replay:{self.spec.name}", handlers=self.handlers, guard=guard,
                    first_seen=(FirstSeenPolicy.BASELINE if plan.partial else FirstSeenPolicy.STRICT))
                self._say(f"replay {self.spec.name}: {'resuming' if resume else 'starting'}; "
                          f"{plan.count} events in range over {len(plan.partitions)} partitions")
                positions = {(q.topic, q.partition): q.start for q in plan.partitions}
                ends = ({(q.topic, q.partition): q.end for q in plan.partitions}
                        if options.end.until is not None else None)
                if options.workers > 1 and len(positions) > 1:
                    self._parallel(conn, source, applier, positions, ends, options)
                source.assign(positions)
                self._rebuild(conn, source, applier, positions, ends, options)
                with conn.transaction():  # outside the swap's lock: can take a while
                    checkpoint.restore_indexes(conn, self.spec.name)
                swapped = False
                if options.end.now:
                    self._swap(conn, source, applier, positions, options)
                    swapped = True
                else:
                    with conn.transaction():
                        checkpoint.mark_built(conn, self.spec.name)
                    self._say(f"replay {self.spec.name}: built up to {options.end.text()} in "
                              f"{', '.join(self.shadow.values())} (not swapped)")
                with conn.transaction():
                    conn.execute("SET LOCAL synchronous_commit = on")  # the end state is durable
                    history.end(conn, run_id, "finished", p.read, p.applied, 0)
                self._history_id = None
            released = True
            lease.release()
        finally:
            source.close()
            if not released:
                try:
                    lease.release()
                except ReplayError as e:  # the failure that got here is the one to report
                    log.error("%s", e)
        if self.reporter:
            self.reporter.update(p, force=True)
        elapsed = time.monotonic() - t0
        tables = tuple(self.spec.tables if swapped else self.shadow.values())
        result = ReplayResult(projection=self.spec.name, resumed=resume, swapped=swapped,
                              read=p.read, applied=p.applied, stale=p.stale, gaps=p.gaps,
                              poison=p.poison, discarded_outbox=applier.outbox.discarded,
                              elapsed_s=elapsed, tables=tables)
        self._say(f"replay {self.spec.name}: done in {elapsed:.1f}s, {p.read} events "
                  f"({result.rate:,.0f}/s), {p.applied} applied, {p.stale} stale, {p.gaps} gaps, "
                  f"{p.poison} poison" + ("; swapped in, live consumer continues" if swapped else ""))
        return result

    def _parallel(self, conn: Any, source: KafkaSource, applier: ReplayApplier,
                  positions: dict[TP, int], ends: dict[TP, int] | None,
                  options: ReplayOptions) -> None:
        """The bulk in worker processes (``casestream.replay.parallel``), then reload the
        offsets they checkpointed as a resume would and take the guard rows they changed."""
        targets = ends if ends is not None else source.high_watermarks(positions)

        def tick() -> None:
            if self.reporter:
                self.progress.lag = max(0, sum(targets.values()) - sum(positions.values())
                                        - applied_so_far(self.dsn, self.spec.name))
                self.reporter.update(self.progress)

        done, changed = run_workers(_Bulk(self, options, applier.first_seen), positions, targets,
                                    options.workers, applier.guard, tick)
        p = self.progress
        p.read += done.read
        p.applied += done.applied
        p.stale += done.stale
        p.gaps += done.gaps
        p.poison += done.poison
        p.unhandled += done.unhandled
        saved = checkpoint.load_offsets(conn, self.spec.name)
        positions.update({tp: o for tp, o in saved.items() if tp in positions})
        applier.commit(changed)

    def _source(self) -> KafkaSource:
        return KafkaSource(self.bootstrap, self.spec.topics,
                           client_id=f"casestream-replay-{self.spec.name}",
                           config=self.kafka_config)

    def _resume_state(self, conn: Any, options: ReplayOptions
                      ) -> tuple[bool, dict[TP, int] | None, dict[tuple[str, str], int]]:
        """(resume?, checkpoint offsets, guard) — resume only an identical unfinished run."""
        if options.restart or conn.execute("SELECT to_regclass('replay_run')").fetchone()[0] is None:
            return False, None, {}
        run = checkpoint.load_run(conn, self.spec.name)
        if (run is None or run.state != "building" or run.from_spec != options.start.text()
                or run.to_spec != options.end.text()
                or tuple(run.shadow_tables) != tuple(self.shadow.values())
                or not all(self._exists(conn, t) for t in self.shadow.values())):
            return False, None, {}
        return (True, checkpoint.load_offsets(conn, self.spec.name),
                checkpoint.load_guard(conn, self.spec.name))

    @staticmethod
    def _exists(conn: Any, table: str) -> bool:
        return conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None

    def _start_run(self, conn: Any, options: ReplayOptions, *, merge: bool = False) -> None:
        with conn.transaction():
            for shadow in self.shadow.values():
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(shadow)))
            self.spec.create_tables(conn, self.shadow)
            checkpoint.start_run(conn, self.spec.name, str(uuid.uuid4()), options.start.text(),
                                 options.end.text(), tuple(self.shadow.values()))
            checkpoint.defer_indexes(conn, self.spec.name, tuple(self.shadow.values()))
            if merge:
                for table, shadow in self.shadow.items():
                    names.copy_rows(conn, table, shadow)

    # ------------------------------------------------------------------ batches

    def _decode(self, msgs: list[Any], positions: dict[TP, int], ends: dict[TP, int] | None,
                new: dict[TP, int]) -> list[tuple[tuple[str, int, int], Any]]:
        """Decode ``msgs`` in order: ``[((topic, partition, offset), Envelope)]``, one entry per
        event the upcasters make of a message (zero, one or several, in order).

        Skips messages at or past ``ends`` and below ``positions`` (re-delivered after a seek);
        records each partition's next offset in ``new``. Poison messages are counted in
        ``progress.poison``, logged with their position and skipped (never in the result).
        """
        items = []
        append = items.append
        decode = getattr(self.codec, "decode_message", None)
        decode_one = self.codec.decode if decode is None else None
        p = self.progress
        utc = timezone.utc
        last_ts: int | None = None
        published: datetime | None = None
        read = 0
        for m in msgs:
            t = m.topic()
            part = m.partition()
            off = m.offset()
            tp = (t, part)
            if ends is not None and off >= ends[tp]:
                continue
            if off < positions.get(tp, 0):
                continue  # re-delivered after a seek
            new[tp] = off + 1
            read += 1
            ts = m.timestamp()[1]
            if ts != last_ts:  # messages produced in one linger window share a timestamp
                last_ts = ts
                published = datetime.fromtimestamp(ts / 1000.0, tz=utc) if ts > 0 else None
            try:
                if decode_one is not None:
                    events: Any = (decode_one(m.value(), published_at=published),)
                else:
                    events = decode(m.value(), published_at=published).events
            except PoisonMessageError as e:
                p.poison += 1
                log.warning("replay %s: skipping poison message %s[%d]@%d: %s",
                            self.spec.name, t, part, off, e)
                continue
            for env in events:  # an event upcaster's results share their message's position
                append(((t, part, off), env))
        p.read += read
        return items

    def _write(self, conn: Any, applier: ReplayApplier, planned: Planned,
               new: dict[TP, int]) -> None:
        """One transaction: shadow rows (handlers) + checkpoint (offsets, guard rows).

        Pipelined (one round trip for the handlers' statements and the checkpoint), except the
        handlers when every one of them writes by ``COPY`` (``projection.WRITES_BY_COPY``),
        which libpq does not allow in pipeline mode; the checkpoint is pipelined either way.
        """
        if applier.writes_by_copy(planned):
            with conn.transaction():
                fast_commits(conn)
                applier.execute(conn, planned)
                with conn.pipeline():
                    self._checkpoint(conn, planned, new)
            return
        with conn.pipeline(), conn.transaction():
            fast_commits(conn)
            applier.execute(conn, planned)
            self._checkpoint(conn, planned, new)

    def _checkpoint(self, conn: Any, planned: Planned, new: dict[TP, int]) -> None:
        if self._lease is not None:
            self._lease.check()  # a replay that lost its lease must not commit more state
        checkpoint.save(conn, self.spec.name, new, planned.changed, planned.applied)
        now = time.monotonic()
        if self._history_id is not None and now - self._history_at >= history.UPDATE_INTERVAL_S:
            self._history_at = now
            p = self.progress  # the reader may be one batch ahead: progress, not an audit
            history.update(conn, self._history_id, p.read, p.applied, p.lag)

    def _rebuild(self, conn: Any, source: KafkaSource, applier: ReplayApplier,
                 positions: dict[TP, int], ends: dict[TP, int] | None,
                 options: ReplayOptions) -> None:
        """Phase 2: batches until caught up (now) or every partition reached its end.

        Two stages: this thread reads, decodes and decides batch N+1 while a writer thread
        commits batch N (``conn`` is used by the writer only). The in-memory guard runs ahead
        of the database by at most one batch; if a write fails the run stops (the checkpoint
        in the database is consistent, a rerun resumes from it).
        """
        with relaxed_gc(), cf.ThreadPoolExecutor(
                1, thread_name_prefix=f"replay-{self.spec.name}") as writer:
            pending: list[cf.Future[None]] = []
            try:
                self._read_loop(conn, source, applier, positions, ends, options, writer, pending)
            finally:
                for f in pending:
                    f.result()

    def _read_loop(self, conn: Any, source: KafkaSource, applier: ReplayApplier,
                   positions: dict[TP, int], ends: dict[TP, int] | None,
                   options: ReplayOptions, writer: cf.ThreadPoolExecutor,
                   pending: list[cf.Future[None]]) -> None:
        p = self.progress
        if ends is not None:
            # A bounded range needs no high watermarks until a poll comes back empty (a
            # worker's whole range, a --to time): the broker round trip is saved.
            highs: dict[TP, int] = dict(ends)
            done = {tp for tp, o in positions.items() if o >= ends[tp]}
            if done:
                source.pause(done)
        else:
            highs = source.high_watermarks(positions)
        fresh = ends is None  # highs were just asked for
        empty = 0
        p.lag = self._lag(positions, ends or highs)
        while True:
            if ends is not None and all(positions[tp] >= ends[tp] for tp in positions):
                return
            if ends is None and p.lag == 0:
                # Caught up with the last known high watermarks: ask the broker now (unless
                # it was just asked) instead of waiting a whole poll timeout in consume().
                if not fresh:
                    highs = source.high_watermarks(positions)
                    p.lag = self._lag(positions, highs)
                if p.lag == 0:
                    return
            fresh = False
            msgs = source.consume(options.batch_size, options.poll_timeout_s)
            if not msgs:
                empty += 1
                highs = source.high_watermarks(positions)
                p.lag = self._lag(positions, ends or highs)
                if ends is None and (p.lag == 0 or empty >= 3):
                    return
                if ends is not None and empty >= 3 and all(
                        positions[tp] >= min(ends[tp], highs[tp]) for tp in positions):
                    return
                continue
            empty = 0
            new: dict[TP, int] = {}
            items = self._decode(msgs, positions, ends, new)
            if new:
                planned = applier.decide(items, p)
                applier.commit(planned.changed)  # ahead of the database by <= one batch
                while pending:
                    pending.pop().result()  # the previous batch committed (or raise)
                pending.append(writer.submit(self._write, conn, applier, planned, new))
                positions.update(new)
            if ends is not None:
                reached = [tp for tp in new if positions[tp] >= ends[tp]]
                if reached:
                    source.pause(reached)
            for tp in new:
                lo_hi = source.watermarks(tp, cached=True)
                if lo_hi[1] > 0:
                    highs[tp] = lo_hi[1]
            p.lag = self._lag(positions, ends or highs)
            if self.reporter:
                self.reporter.update(p)

    @staticmethod
    def _lag(positions: dict[TP, int], ends: dict[TP, int]) -> int:
        return sum(max(0, ends.get(tp, o) - o) for tp, o in positions.items())

    # ------------------------------------------------------------------ swap

    def _swap(self, conn: Any, source: KafkaSource, applier: ReplayApplier,
              positions: dict[TP, int], options: ReplayOptions) -> None:
        """Phase 3 (see module docstring); retried if the live tables cannot be locked."""
        for attempt in range(1, options.swap_attempts + 1):
            saved_positions = dict(positions)
            saved_guard = dict(applier.guard)
            saved_progress = (self.progress.read, self.progress.applied, self.progress.stale,
                              self.progress.gaps, self.progress.poison)
            try:
                self._swap_once(conn, source, applier, positions, options)
                return
            except _LOCK_RETRY as e:
                positions.clear()
                positions.update(saved_positions)
                applier.guard = saved_guard
                p = self.progress
                p.read, p.applied, p.stale, p.gaps, p.poison = saved_progress
                source.assign(positions)
                self._say(f"replay {self.spec.name}: swap attempt {attempt} could not lock the "
                          f"live tables ({type(e).__name__}); retrying")
                time.sleep(min(2.0, 0.2 * attempt))
        raise ReplayError(f"replay {self.spec.name}: live tables {', '.join(self.spec.tables)} "
                          f"stayed locked; shadow tables kept, rerun to resume")

    def _swap_once(self, conn: Any, source: KafkaSource, applier: ReplayApplier,
                   positions: dict[TP, int], options: ReplayOptions) -> None:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = on")  # the swap is durable at once
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(
                sql.Literal(f"{int(options.lock_timeout_s * 1000)}ms")))
            for table in self.spec.tables:
                conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                    sql.Identifier(table)))
            # Every event the live consumer applied so far is below these offsets.
            highs = source.high_watermarks(positions)
            deadline = time.monotonic() + options.catch_up_timeout_s
            while any(positions[tp] < highs[tp] for tp in positions):
                if time.monotonic() > deadline:
                    raise _CatchUpTimeout(f"still below the high watermarks after "
                                          f"{options.catch_up_timeout_s:.0f}s")
                msgs = source.consume(options.batch_size, options.poll_timeout_s)
                if not msgs:
                    # only non-data records (transaction markers) may be left below a high
                    # watermark: the client's fetch position moves past them
                    for tp, at in source.positions(positions).items():
                        if at > positions[tp]:
                            positions[tp] = min(at, highs[tp])
                    continue
                new: dict[TP, int] = {}
                items = self._decode(msgs, positions, highs, new)
                if new:
                    before = self.progress.applied
                    with conn.transaction():
                        changed = applier.apply(conn, items, self.progress)
                        checkpoint.save(conn, self.spec.name, new, changed,
                                        self.progress.applied - before)
                    applier.commit(changed)
                    positions.update(new)
            defined = names.defined_names(conn, self.spec.create_tables, self.spec.live_names())
            for table, shadow in self.shadow.items():
                retired = table + "_retired"
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(retired)))
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(table), sql.Identifier(retired)))
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(shadow), sql.Identifier(table)))
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(retired)))
                names.rename_to(conn, table, defined.get(table, {}))
            checkpoint.finish(conn, self.spec.name)  # the run row: nothing left to resume
        self.progress.lag = 0
        with conn.transaction():  # leftovers of a finished run; cleared again by the next start
            checkpoint.clear(conn, self.spec.name)

    def _say(self, text: str) -> None:
        if self.reporter:
            self.reporter.message(text)
        else:
            log.info("%s", text)


class _Bulk:
    """A replay's bulk as a forked worker runs it (``casestream.replay.parallel.Partitions``)."""

    def __init__(self, replayer: Replayer, options: ReplayOptions, first_seen: Any) -> None:
        self.name = replayer.spec.name
        self._replayer, self._options, self._first_seen = replayer, options, first_seen

    def rebuild_partitions(self, positions: dict[TP, int], ends: dict[TP, int],
                           guard: dict[tuple[str, str], int]) -> tuple[Progress, dict[tuple[str, str], int]]:
        r = self._replayer
        r.reporter = None
        r._history_id = None  # the parent records the run
        r.progress = p = Progress(started=time.monotonic())
        source = r._source()
        try:
            with psycopg.connect(r.dsn, autocommit=True, prepare_threshold=None) as conn:
                applier = ReplayApplier(consumer=f"replay:{self.name}", handlers=r.handlers,
                                        first_seen=self._first_seen, guard=guard)
                source.assign(positions)
                r._rebuild(conn, source, applier, dict(positions), ends, self._options)
        finally:
            source.close()
        return p, applier.guard
