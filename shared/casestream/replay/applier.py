"""Apply decoded events to a projection in REPLAY mode: an in-memory version guard around the
runner both engines share (:class:`casestream.handlers.runner.HandlerRunner`).

No Kafka, no I/O of its own: handlers get ``ctx.conn`` (the caller's transaction) and a
discarding outbox. The same rules as the live runtime (``casestream.handlers.guard.decide``):

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
Runs, contexts and calls are the runner's (the live consumer's too): consecutive events whose
handlers are the same batch functions form a *run*, a batch handler gets the whole run in one
call (event order kept), a per-event handler is called per event; a coroutine (``async def``)
handler is awaited before the next call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from casestream.events.envelope import Envelope
from casestream.handlers.guard import FirstSeenPolicy, Verdict, decide
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.projection import WRITES_BY_COPY
from casestream.handlers.registry import DiscardingOutbox, HandlerRegistry, RegisteredHandler
from casestream.handlers.runner import HandlerRunner
from casestream.replay.errors import ReplayHandlerError
from casestream.replay.progress import Progress

Position = tuple[str, int, int]
Key = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """One batch decided: handler runs to execute, guard rows changed, events applied."""

    runs: list[tuple[tuple[RegisteredHandler, ...], list[tuple[Position, Envelope]]]]
    changed: dict[Key, int]
    applied: int
    #: per run: True if its handlers are all batch handlers (one call for the run); empty: ask
    batch: list[bool] = field(default_factory=list)


@dataclass(slots=True)
class ReplayApplier:
    """Guard state (in memory, persisted by the caller) + REPLAY dispatch for one projection."""

    consumer: str
    handlers: HandlerRegistry
    first_seen: FirstSeenPolicy = FirstSeenPolicy.BASELINE
    guard: dict[Key, int] = field(default_factory=dict)
    outbox: DiscardingOutbox = field(default_factory=DiscardingOutbox)
    #: runs, contexts and calls (REPLAY handlers; one thread uses an applier at a time)
    runner: HandlerRunner = field(init=False)

    def __post_init__(self) -> None:
        self.runner = HandlerRunner(consumer=self.consumer, handlers=self.handlers,
                                    mode=ProcessingMode.REPLAY, outbox=self.outbox,
                                    loop=_LoopPerCall())

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

        Verdicts are ``casestream.handlers.guard.decide``'s; the common cases (next version of a known
        aggregate, first event of a new one) are decided inline, the rest by ``decide`` itself.
        """
        changed: dict[Key, int] = {}
        taken: list[tuple[Position, Envelope]] = []
        guard = self.guard
        policy = self.first_seen
        baseline = policy is FirstSeenPolicy.BASELINE
        runner = self.runner
        keys = runner._keys  # noqa: SLF001 - the runner's cache, read inline on this hot loop
        applied = stale = gaps = unhandled = 0
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
            found = keys.get(env.event_type) or runner.run_key(env.event_type)
            if not found[1]:
                unhandled += 1
                continue
            applied += 1
            taken.append(item)
        progress.applied += applied
        progress.stale += stale
        progress.gaps += gaps
        progress.unhandled += unhandled
        runs = runner.runs(taken, _event_type)
        return Planned(runs=[(hs, r) for r, hs, _b in runs], batch=[b for _r, _hs, b in runs],
                       changed=changed, applied=applied)

    def execute(self, conn: Any, planned: Planned) -> None:
        """Run the handlers of ``planned`` on ``conn`` (the caller's transaction).

        Raises:
            ReplayHandlerError: a handler raised (with its position).
        """
        runner = self.runner
        batch = planned.batch or [all(h.batch for h in hs) for hs, _run in planned.runs]
        for (hs, run), together in zip(planned.runs, batch, strict=True):
            if together:
                runner.call_batch(conn, hs, [pos for pos, _ in run], [e for _, e in run], _failed)
            else:
                for pos, env in run:
                    runner.call_each(conn, hs, pos, env, _failed)

    @staticmethod
    def writes_by_copy(planned: Planned) -> bool:
        """True if ``planned`` runs handlers and every one writes by ``COPY``
        (``casestream.handlers.projection.WRITES_BY_COPY``), so its batch may not be pipelined."""
        handlers = [h for hs, _run in planned.runs for h in hs]
        return bool(handlers) and all(getattr(h.fn, WRITES_BY_COPY, False) for h in handlers)

    def commit(self, changed: dict[Key, int]) -> None:
        """Record ``changed`` in memory after its transaction committed."""
        self.guard.update(changed)


class _LoopPerCall:
    """Awaits each coroutine handler call on an event loop of its own (``asyncio.run``): a
    replay calls handlers from its writer thread and from its own, one call at a time, and
    leaves no loop to close."""

    @staticmethod
    def run_chains(chains: list[list[Any]], call: Callable[[Any], Any]) -> tuple[int, list[Any]]:
        unknown = 0
        for chain in chains:
            for it in chain:
                try:
                    unknown += asyncio.run(call(it))
                except Exception as e:  # noqa: BLE001 - handed back, raised by the runner
                    return unknown, [(it, e)]
        return unknown, []


def _event_type(item: tuple[Position, Envelope]) -> str:
    return item[1].event_type


def _failed(h: RegisteredHandler, pos: Position, e: Exception) -> ReplayHandlerError:
    return ReplayHandlerError(f"handler {h.name} failed at {pos[0]}[{pos[1]}]@{pos[2]}: "
                              f"{type(e).__name__}: {e}", position=pos)
