"""Apply decoded events to a projection in REPLAY mode: version guard, handler dispatch.

No Kafka, no I/O of its own: handlers get ``ctx.conn`` (the caller's transaction) and a
discarding outbox. The same rules as the live runtime (``casestream.consumer.guard.decide``):

- ``v <= last``   STALE — a duplicate (relay re-publish) or out-of-date copy: skipped;
- ``v == last+1`` APPLY — handlers run, ``last = v``;
- ``v > last+1``  GAP — in history nothing can arrive later to fill it (per-aggregate order
  is per partition), so the replay applies it, records ``last = v`` and counts a gap
  (the live runtime would hold, then park it; ``casestream dlq redrive --accept-gap`` is its
  equivalent).

Events an upcaster made of one stored message share its position and form one aggregate step:
the first is decided as above, the others follow its verdict (as in live).

Only handlers whose kind runs in REPLAY (``PROJECTION``) are called; events without one still
advance the guard (an aggregate's versions count whatever the type, as in live).
Consecutive events with the same handler functions form a *run*: a batch handler gets the
whole run in one call (event order kept), a per-event handler is called per event; a
coroutine (``async def``) handler is awaited before the next call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from casestream.events.envelope import Envelope
from casestream.consumer.guard import FirstSeenPolicy, Verdict, decide
from casestream.consumer.cursors import SharedCursor
from casestream.consumer.handlers import DiscardingOutbox, HandlerContext, HandlerRegistry, RegisteredHandler
from casestream.consumer.processing import ProcessingMode
from casestream.replay.errors import ReplayHandlerError
from casestream.replay.progress import Progress
from casestream.replay.projection import WRITES_BY_COPY

Position = tuple[str, int, int]
Key = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """One batch decided: handler runs to execute, guard rows changed, events applied."""

    runs: list[tuple[tuple[RegisteredHandler, ...], list[tuple[Position, Envelope]]]]
    changed: dict[Key, int]
    applied: int


@dataclass(slots=True)
class ReplayApplier:
    """Guard state (in memory, persisted by the caller) + REPLAY dispatch for one projection."""

    consumer: str
    handlers: HandlerRegistry
    first_seen: FirstSeenPolicy = FirstSeenPolicy.BASELINE
    guard: dict[Key, int] = field(default_factory=dict)
    outbox: DiscardingOutbox = field(default_factory=DiscardingOutbox)
    _cache: dict[str, tuple[tuple[Any, ...], tuple[RegisteredHandler, ...]]] = field(
        default_factory=dict)
    #: ``HandlerContext.cursor`` of every call: the handlers run one after the other
    _shared: SharedCursor = field(default_factory=SharedCursor)

    def handlers_of(self, event_type: str) -> tuple[tuple[Any, ...], tuple[RegisteredHandler, ...]]:
        """(run key, handlers) of ``event_type`` in REPLAY. The run key compares functions and
        kinds, not event types, so one batch handler registered for several types forms one run."""
        found = self._cache.get(event_type)
        if found is None:
            hs = self.handlers.handlers_for(event_type, ProcessingMode.REPLAY)
            found = (tuple((h.fn, h.kind, h.batch) for h in hs), hs)
            self._cache[event_type] = found
        return found

    def apply(self, conn: Any, items: Sequence[tuple[Position, Envelope]],
              progress: Progress) -> dict[Key, int]:
        """Decide and apply ``items`` (in partition offset order) using ``conn``.

        Returns the guard rows changed (key -> new last version) for the checkpoint; the
        in-memory guard is updated only through :meth:`commit` once the transaction commits.

        Raises:
            ReplayHandlerError: a handler raised (the caller's transaction must roll back).
        """
        planned = self.decide(items, progress)
        self.execute(conn, planned)
        return planned.changed

    def decide(self, items: Sequence[tuple[Position, Envelope]], progress: Progress) -> Planned:
        """The guard verdicts and handler runs of ``items`` (no I/O, guard not modified).

        Verdicts are ``casestream.consumer.guard.decide``'s; the common cases (next version of a known
        aggregate, first event of a new one) are decided inline, the rest by ``decide`` itself.
        """
        changed: dict[Key, int] = {}
        runs: list[tuple[tuple[Any, ...], tuple[RegisteredHandler, ...],
                         list[tuple[Position, Envelope]]]] = []
        guard = self.guard
        policy = self.first_seen
        baseline = policy is FirstSeenPolicy.BASELINE
        cache = self._cache
        applied = stale = gaps = unhandled = 0
        run_key: Any = None
        run: list[tuple[Position, Envelope]] = []
        prev_pos: Any = None
        prev_taken = False
        for item in items:
            env = item[1]
            key = (env.aggregate_type, env.aggregate_id)
            v = env.aggregate_version
            if item[0] == prev_pos:
                # Another event an upcaster made of the same stored event: one aggregate step,
                # decided with the first.
                if not prev_taken:
                    continue
            else:
                prev_pos = item[0]
                prev_taken = False
                last = changed.get(key)
                if last is None:
                    last = guard.get(key)
                if not (v >= 1 and (v == last + 1 if last is not None else (baseline or v == 1))):
                    verdict = decide(last, v, policy)
                    if verdict is Verdict.STALE:
                        stale += 1
                        continue
                    if verdict is Verdict.GAP:
                        gaps += 1
                prev_taken = True
            changed[key] = v
            found = cache.get(env.event_type)
            if found is None:
                found = self.handlers_of(env.event_type)
            if not found[1]:
                unhandled += 1
                continue
            applied += 1
            if found[0] == run_key and runs:
                run.append(item)
            else:
                run_key = found[0]
                run = [item]
                runs.append((run_key, found[1], run))
        progress.applied += applied
        progress.stale += stale
        progress.gaps += gaps
        progress.unhandled += unhandled
        return Planned(runs=[(hs, r) for _k, hs, r in runs], changed=changed,
                       applied=applied)

    def execute(self, conn: Any, planned: Planned) -> None:
        """Run the handlers of ``planned`` on ``conn`` (the caller's transaction)."""
        for hs, run in planned.runs:
            self._call(conn, hs, run)

    @staticmethod
    def writes_by_copy(planned: Planned) -> bool:
        """True if ``planned`` runs handlers and every one writes by ``COPY``
        (``casestream.replay.projection.WRITES_BY_COPY``), so its batch may not be pipelined."""
        handlers = [h for hs, _run in planned.runs for h in hs]
        return bool(handlers) and all(getattr(h.fn, WRITES_BY_COPY, False) for h in handlers)

    def commit(self, changed: dict[Key, int]) -> None:
        """Record ``changed`` in memory after its transaction committed."""
        self.guard.update(changed)

    def _call(self, conn: Any, hs: tuple[RegisteredHandler, ...],
              run: list[tuple[Position, Envelope]]) -> None:
        for h in hs:
            if h.batch:
                (t, p, o) = run[0][0]
                ctx = HandlerContext(conn=conn, outbox=self.outbox, mode=ProcessingMode.REPLAY,
                                     consumer=self.consumer, topic=t, partition=p, offset=o,
                                     positions=tuple(pos for pos, _ in run),
                                     shared_cursor=self._shared)
                self._guarded(h, ctx, [e for _, e in run], run[0][0])
            else:
                for (t, p, o), env in run:
                    ctx = HandlerContext(conn=conn, outbox=self.outbox,
                                         mode=ProcessingMode.REPLAY, consumer=self.consumer,
                                         topic=t, partition=p, offset=o,
                                         shared_cursor=self._shared)
                    self._guarded(h, ctx, env, (t, p, o))

    @staticmethod
    def _guarded(h: RegisteredHandler, ctx: HandlerContext, arg: Any, pos: Position) -> None:
        try:
            result = h.fn(ctx, arg)
            if h.awaits:
                asyncio.run(result)  # a coroutine projection, awaited one call at a time
        except Exception as e:
            raise ReplayHandlerError(
                f"handler {h.name} failed at {pos[0]}[{pos[1]}]@{pos[2]}: "
                f"{type(e).__name__}: {e}", position=pos) from e
