"""Partition-parallel rebuild: the bulk of a replay split over worker processes (``--workers``).

Why it is sound: events of one aggregate share a key, so they live in one partition; a worker
owning a set of partitions owns their aggregates' guard rows and checkpoint rows outright, and
the shadow rows of different workers never collide (different cases / event ids). Each worker
is the ordinary phase-2 loop on its partitions (what :class:`Partitions` runs: the engine's
``Replayer`` gives one), up to the high watermarks the parent snapshotted, each batch one
transaction with its checkpoint. This module knows the engine only through that port.

The parent then reloads the offsets from the checkpoint — exactly what a resume does — and
takes each worker's guard rows from the worker itself (sent back over a pipe when its last
batch committed: the rows it changed, the same the checkpoint holds for its partitions, so the
parent does not fold them from the checkpoint again), then runs the rest (tail, locked catch-up, swap) alone. Workers are forked (the spec, handlers, prepared
codec and the guard the run started with are inherited, nothing is pickled on the way in), use
their own Kafka client and PostgreSQL connection, never touch the parent's, and leave with
``os._exit``. Each asks the
kernel to SIGKILL it when the parent dies (``PR_SET_PDEATHSIG``), so a killed replay leaves no
orphan writing into the shadow tables; its open transaction rolls back.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from casestream.replay.errors import ReplayError
from casestream.replay.progress import Progress

TP = tuple[str, int]
Key = tuple[str, str]  # (aggregate_type, aggregate_id)
_PR_SET_PDEATHSIG = 1


class Partitions(Protocol):
    """The bulk of one replay as a worker process runs it."""

    #: names the worker processes (``replay-<name>-<i>``)
    name: str

    def rebuild_partitions(self, positions: dict[TP, int], ends: dict[TP, int],
                           guard: dict[Key, int]) -> tuple[Progress, dict[Key, int]]:
        """In this (forked) process: rebuild ``positions`` up to ``ends`` from the guard rows
        ``guard``, every batch committed with its checkpoint; returns the counters and the
        guard rows afterwards (``guard`` updated)."""
        ...


def split(tps: list[TP], workers: int) -> list[list[TP]]:
    """Partitions dealt round-robin to at most ``workers`` non-empty groups (pure)."""
    groups = [sorted(tps)[i::workers] for i in range(max(1, workers))]
    return [g for g in groups if g]


def run_workers(bulk: Partitions, positions: dict[TP, int], ends: dict[TP, int], workers: int,
                guard: dict[Key, int] | None = None,
                tick: Callable[[], None] | None = None) -> tuple[Progress, dict[Key, int]]:
    """Rebuild ``positions`` up to ``ends`` in ``workers`` forked processes, starting from the
    guard rows ``guard`` (what the checkpoint holds; None: empty); ``tick()`` is called about
    every 0.5 s while they run (progress lines).

    Returns:
        The workers' counters summed, and the guard rows they changed (aggregate -> last
        version; the workers own disjoint aggregates, so no row comes from two of them).

    Raises:
        ReplayError: a worker failed (its last batch rolled back; the checkpoint is consistent).
    """
    ctx = multiprocessing.get_context("fork")
    start = guard if guard is not None else {}
    procs: list[Any] = []
    pipes: dict[Any, int] = {}
    for group in split([tp for tp in positions if positions[tp] < ends[tp]], workers):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, name=f"replay-{bulk.name}-{len(procs)}",
                           args=(bulk, {tp: positions[tp] for tp in group},
                                 {tp: ends[tp] for tp in group}, start, send))
        proc.start()
        send.close()  # the worker's end only: EOF here when it exits without a result
        pipes[receive] = len(procs)
        procs.append(proc)
    results: dict[int, tuple[tuple[int, ...], dict[Key, int]]] = {}
    try:
        while pipes:
            # Results are read while the workers run: a guard larger than the pipe's buffer
            # would otherwise block its worker in send() and the parent in join() forever.
            for ready in multiprocessing.connection.wait(list(pipes), timeout=0.5):
                i = pipes.pop(ready)
                try:
                    results[i] = ready.recv()
                except EOFError:
                    pass  # exited without a result: its exit status says why
                ready.close()
            if tick is not None:
                tick()
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        for receive in pipes:
            receive.close()
    failed = [p.name for i, p in enumerate(procs) if p.exitcode != 0 or i not in results]
    if failed:
        raise ReplayError(f"replay worker(s) {', '.join(failed)} failed; rerun resumes")
    total = Progress()
    changed: dict[Key, int] = {}
    for (read, applied, stale, gaps, poison, unhandled), rows in results.values():
        total.read += read
        total.applied += applied
        total.stale += stale
        total.gaps += gaps
        total.poison += poison
        total.unhandled += unhandled
        changed.update(rows)
    return total, changed


def applied_so_far(dsn: str, projection: str) -> int:
    """Events the workers of ``projection``'s run have applied (their checkpoint's count; 0
    when the database does not answer)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute("SELECT events_applied FROM replay_run WHERE projection = %s",
                               (projection,)).fetchone()
            return row[0] if row else 0
    except psycopg.Error:
        return 0


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's kill() in finally still applies
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _worker(bulk: Partitions, positions: dict[TP, int], ends: dict[TP, int],
            guard: dict[Key, int], send: Any) -> None:
    code = 1
    try:
        _die_with_parent()
        p, after = bulk.rebuild_partitions(positions, ends, dict(guard))
        # Every batch committed: these rows are the checkpoint's for this worker's aggregates.
        changed = {k: v for k, v in after.items() if guard.get(k) != v}
        send.send(((p.read, p.applied, p.stale, p.gaps, p.poison, p.unhandled), changed))
        send.close()
        code = 0
    except BaseException:  # noqa: BLE001 - reported on stderr, exit status tells the parent
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)
