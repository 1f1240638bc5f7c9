"""Key-parallel scheduling: events of different aggregates of one partition run concurrently.

Pure (no Kafka, no database, no threads of its own): the runtime feeds it decoded records in
offset order, worker threads take *units* from it and report what they applied, and the
runtime reads the offsets it may commit. Used when ``ConsumerSettings.key_concurrency > 1``.

Rules (the same as Confluent Parallel Consumer's ``KEY`` ordering, offsets tracked per
partition):

- **Order per key**: records are queued per key (the aggregate ``(type, id)`` of the decoded
  envelope; for a record that failed to decode, its Kafka key). A key is in at most one unit at
  a time, and a unit holds a prefix of its key's queue, so one aggregate's events are applied
  in offset order; different keys run in parallel.
- **Offsets**: per partition, the committable offset is the lowest offset not yet applied
  (or last fetched + 1 when everything fetched was applied): the committed offset never
  passes an unfinished event. Events applied after an unfinished one are delivered again after a
  crash; the inbox makes that a no-op.
- **Cuts** (a retryable failure, or a unit whose transaction failed as a whole): the partition
  is to be re-fetched from the cut offset. Everything queued of it at or after that offset is
  dropped, records of it arriving before the re-fetch starts (fetched before the seek) are
  dropped too, and its committable offset stays at or below the cut. Units of other keys of
  that partition already running finish; their events come again and are duplicates.
- **Units**: a unit is a list of decoded entries in fetch order (per partition: offset order)
  that the caller applies in one database transaction (``BatchProcessor.process``). Its size
  is the queue divided by the concurrency, between 1 and ``max_unit`` entries, so that every
  worker gets work and transactions stay large enough to be cheap; ``take(min_size=n)`` makes
  it at least ``n`` entries (fewer only when fewer are ready): a unit's transaction, inbox
  claim and guard statements cost the same CPU for 1 event as for 30, so many one-event units
  make the process CPU-bound long before the workers are busy.

Not thread-safe by itself: callers hold one lock around every call (the runtime does).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any

from casestream.consumer.batch_model import TP, item_of
from casestream.consumer.records import Record

Entry = tuple[Record, Any, BaseException | None]  # an entry of ``Decoded``


def entry_key(entry: Entry) -> tuple[str, Any]:
    """The ordering key of a decoded entry: the aggregate ``(type, id)``; the Kafka key
    (``("", key bytes)``) for a record that failed to decode."""
    rec, env, err = entry
    if err is None and env is not None:
        return item_of(rec, env).key
    return ("", rec.key)


KEY_QUEUE_HARD = 2
"""Key queue length, in multiples of :func:`key_queue_limit`, at which partitions are paused."""


def key_queue_limit(batch_size: int, key_concurrency: int) -> int:
    """Entries queued before the loop fetches one record per step:
    ``max(2 x batch_size, 32 x key_concurrency)``."""
    return max(2 * batch_size, 32 * key_concurrency)


class FlowStep(enum.Enum):
    """What the loop does to its fetching partitions (see :func:`key_queue_flow`)."""

    PAUSE = "pause"
    RESUME = "resume"


def key_queue_flow(queued: int, limit: int, paused: bool) -> FlowStep | None:
    """Back-pressure of the key queue: ``queued`` entries, ``limit`` from
    :func:`key_queue_limit`, ``paused``: the partitions are paused for it now.

    At ``limit`` the loop fetches one record per step (it still serves rebalance and commit
    callbacks) and librdkafka stops fetching by itself once its own queue is full
    (``queued.min.messages``, ``queued.max.messages.kbytes``). Only at ``KEY_QUEUE_HARD`` x
    ``limit`` (the queued keys all wait on running units: a hot aggregate) are the partitions
    paused, until the queue is below ``limit`` again. Not at every fill: a pause purges the
    records librdkafka prefetched (``rd_kafka_pause_partitions``) and each resume fetches them
    again, which leaves the workers without units meanwhile.

    Returns:
        ``PAUSE`` / ``RESUME`` when that is to be done now, else None.
    """
    if not paused and queued >= KEY_QUEUE_HARD * limit:
        return FlowStep.PAUSE
    if paused and queued < limit:
        return FlowStep.RESUME
    return None


class PartitionOffsets:
    """Offsets of one partition: which fetched offsets are applied, and the committable one."""

    __slots__ = ("order", "done", "end")

    def __init__(self) -> None:
        self.order: deque[int] = deque()  # fetched, oldest first; head = lowest not applied
        self.done: set[int] = set()  # applied, not yet popped from ``order``
        self.end: int | None = None  # last fetched + 1 (after a cut: at most the cut)

    def fetched(self, offset: int) -> None:
        self.order.append(offset)
        self.end = offset + 1

    def applied(self, offset: int) -> None:
        if offset < self.base():
            return  # a duplicate of what is committable already (a re-fetched copy)
        self.done.add(offset)

    def base(self) -> int:
        """The committable offset (-1 before anything was fetched)."""
        order, done = self.order, self.done
        while order and order[0] in done:
            done.discard(order.popleft())
        if order:
            return order[0]
        return -1 if self.end is None else self.end

    def cut(self, offset: int) -> None:
        """Offsets at or after ``offset`` are fetched again: forget them."""
        order = self.order
        while order and order[-1] >= offset:
            order.pop()
        if self.end is None or self.end > offset:
            self.end = offset


@dataclass(slots=True)
class Unit:
    """Entries one worker applies in one transaction; ``keys``: the keys it holds."""

    entries: list[Entry]
    keys: list[tuple[str, Any]]


class KeyScheduler:
    """Per-key queues, units for workers, committable offsets per partition.

    Args:
        concurrency: how many units run at once (``ConsumerSettings.key_concurrency``).
        max_unit: most entries in one unit (``ConsumerSettings.batch_size``).
    """

    def __init__(self, concurrency: int, max_unit: int) -> None:
        self.concurrency = concurrency
        self.max_unit = max_unit
        self._queues: dict[tuple[str, Any], deque[tuple[int, Entry]]] = {}
        self._ready: deque[tuple[str, Any]] = deque()  # keys with queued entries, not running
        self._running: set[tuple[str, Any]] = set()
        self._offsets: dict[TP, PartitionOffsets] = {}
        self._refetch: dict[TP, int] = {}  # tp -> cut offset whose re-fetch has not begun
        self._rewinds: dict[TP, tuple[int, float]] = {}  # for the runtime to seek
        self._seq = 0
        self.queued = 0  # entries waiting
        self.inflight = 0  # units running
        self.hold = False  # no new units (a sweep or a rebalance waits for the running ones)

    # ------------------------------------------------------------------ input

    def add(self, entries: list[Entry]) -> int:
        """Queue decoded entries (fetch order). Returns how many were dropped as stale (of a
        partition being re-fetched from an earlier offset)."""
        dropped = 0
        for entry in entries:
            rec = entry[0]
            tp = rec.tp
            cut = self._refetch.get(tp)
            if cut is not None:
                if rec.offset != cut:
                    dropped += 1
                    continue
                del self._refetch[tp]  # the re-fetch has begun
            offsets = self._offsets.get(tp)
            if offsets is None:
                offsets = self._offsets[tp] = PartitionOffsets()
            offsets.fetched(rec.offset)
            key = entry_key(entry)
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = deque()
                if key not in self._running:
                    self._ready.append(key)
            self._seq += 1
            queue.append((self._seq, entry))
            self.queued += 1
        return dropped

    # ------------------------------------------------------------------ units

    def take(self, min_size: int = 1) -> Unit | None:
        """The next unit to apply, or None (nothing ready, fewer than ``min_size`` entries
        queued, or ``hold``). Its size: the queue divided by the concurrency, at least
        ``min_size`` (capped at ``max_unit``)."""
        if (self.hold or not self._ready or self.inflight >= self.concurrency
                or self.queued < min_size):
            return None
        target = min(self.max_unit, max(min_size, -(-self.queued // self.concurrency)))
        picked: list[tuple[int, Entry]] = []
        keys: list[tuple[str, Any]] = []
        ready, queues = self._ready, self._queues
        while ready and len(picked) < target:
            key = ready.popleft()
            queue = queues[key]
            room = target - len(picked)
            while queue and room:
                picked.append(queue.popleft())
                room -= 1
            if not queue:
                del queues[key]
            keys.append(key)
            self._running.add(key)
        self.queued -= len(picked)
        self.inflight += 1
        picked.sort(key=lambda p: p[0])  # fetch order: offset order within each partition
        return Unit([e for _s, e in picked], keys)

    def finish(self, unit: Unit, commits: dict[TP, int], cuts: dict[TP, tuple[int, float]]) -> None:
        """``unit`` is over: its entries below ``commits[tp]`` (and below a cut of ``tp``) were
        applied; each cut ``tp -> (offset, delay_s)`` re-fetches ``tp`` from ``offset``."""
        self.inflight -= 1
        for key in unit.keys:
            self._running.discard(key)
            if key in self._queues:
                self._ready.append(key)
        for entry in unit.entries:
            rec = entry[0]
            tp = rec.tp
            cut = cuts.get(tp)
            limit = commits.get(tp, -1) if cut is None else min(cut[0], commits.get(tp, cut[0]))
            if rec.offset < limit:
                offsets = self._offsets.get(tp)
                if offsets is not None:
                    offsets.applied(rec.offset)
        for tp, (offset, delay) in cuts.items():
            self.cut(tp, offset, delay)

    def failed(self, unit: Unit, delay_s: float) -> None:
        """``unit``'s transaction failed as a whole: nothing of it applied; every partition
        in it is re-fetched from its first offset in the unit after ``delay_s``."""
        first: dict[TP, int] = {}
        for rec, _env, _err in unit.entries:
            if rec.tp not in first:
                first[rec.tp] = rec.offset
        self.finish(unit, {}, {tp: (off, delay_s) for tp, off in first.items()})

    def cut(self, tp: TP, offset: int, delay_s: float) -> None:
        """Re-fetch ``tp`` from ``offset`` after ``delay_s``: drop what is queued of it there
        and after, and what arrives of it before the re-fetch."""
        before = self._refetch.get(tp)
        if before is not None and before <= offset:
            # A re-fetch from an earlier offset is pending: it covers this one.
            self._merge_rewind(tp, before, delay_s)
            return
        self._refetch[tp] = offset
        self._merge_rewind(tp, offset, delay_s)
        offsets = self._offsets.get(tp)
        if offsets is not None:
            offsets.cut(offset)
        self._drop_queued(lambda rec: rec.tp == tp and rec.offset >= offset)

    def _merge_rewind(self, tp: TP, offset: int, delay_s: float) -> None:
        prev = self._rewinds.get(tp)
        if prev is None or offset < prev[0] or (offset == prev[0] and delay_s > prev[1]):
            self._rewinds[tp] = (offset, delay_s)

    def _drop_queued(self, drop: Any) -> None:
        for key in list(self._queues):
            queue = self._queues[key]
            kept = deque(p for p in queue if not drop(p[1][0]))
            self.queued -= len(queue) - len(kept)
            if kept:
                self._queues[key] = kept
            else:
                del self._queues[key]
        self._ready = deque(k for k in self._ready if k in self._queues)

    # ------------------------------------------------------------------ output

    def rewinds(self) -> dict[TP, tuple[int, float]]:
        """Seeks the runtime owes (tp -> (offset, pause s)), handed over once."""
        out, self._rewinds = self._rewinds, {}
        return out

    def committable(self) -> dict[TP, int]:
        """The offset to commit per partition (lowest not applied, or last fetched + 1)."""
        out = {}
        for tp, offsets in self._offsets.items():
            base = offsets.base()
            if base >= 0:
                out[tp] = base
        return out

    def uncommitted(self) -> dict[TP, tuple[int, int]]:
        """Per partition, ``(committable offset, last fetched + 1)`` where the first is lower:
        the records between them are redelivered if the member stops now."""
        out = {}
        for tp, offsets in self._offsets.items():
            base = offsets.base()
            if base >= 0 and offsets.end is not None and base < offsets.end:
                out[tp] = (base, offsets.end)
        return out

    def forget(self, tps: set[TP]) -> None:
        """Partitions revoked or lost: drop their queued entries and offsets (no unit of them
        may be running: the caller waits for ``inflight == 0`` first)."""
        self._drop_queued(lambda rec: rec.tp in tps)
        for tp in tps:
            self._offsets.pop(tp, None)
            self._refetch.pop(tp, None)
            self._rewinds.pop(tp, None)


__all__ = ["FlowStep", "KEY_QUEUE_HARD", "KeyScheduler", "PartitionOffsets", "Unit", "entry_key",
           "key_queue_flow", "key_queue_limit"]
