"""Worker processes of one service instance behind one HTTP port (prefork).

With ``CASESTREAM_WORKERS`` = N > 1, :func:`casestream.service.run_service` runs a
:class:`Supervisor` instead of the service: it binds the HTTP socket
(:func:`bind_listener`, host and port from the service's settings) and forks N workers. Each
worker builds the whole service after the fork — pool, codec, consumers, relay: no client
crosses a fork (:mod:`casestream.forks`) — and serves HTTP on the inherited socket, so the
kernel hands each connection to one worker from one accept queue (gunicorn's model;
uvicorn's ``--workers`` shares one socket the same way). Each worker is a member of every
consumer group of the service and a relay shard holder, like another instance.

The supervisor holds no client and does no service work. Its rules:

- a worker that exits while the supervisor is not stopping is forked again after a backoff
  (``backoff_s`` doubling up to ``backoff_max_s``; a worker that ran ``stable_s`` first
  starts again from ``backoff_s``);
- a worker slot that fails ``max_failures`` times in a row (a crash loop), or a worker that
  exits with status 2 (start-up failed: settings, database, registry — retrying here cannot
  help), stops every worker; the supervisor then exits 1 (2 for a start-up failure) and the
  orchestrator restarts the instance;
- SIGTERM or SIGINT is forwarded to every worker as SIGTERM (a second SIGINT as SIGINT:
  uvicorn then drops the HTTP drain); a worker still running ``stop_budget_s`` later is
  SIGKILLed, and the exit status is 1 unless every worker exited 0;
- workers run in their own process group (a terminal's Ctrl-C reaches only the supervisor)
  and are SIGKILLed by the kernel when the supervisor dies (Linux ``PR_SET_PDEATHSIG``): a
  killed instance leaves no worker behind holding partitions or the port.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Supervisor", "bind_listener", "exit_status"]

log = logging.getLogger("casestream.service.workers")

#: ``prctl`` option: the signal a process gets when its parent thread dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def bind_listener(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port``, inheritable by forked workers (as uvicorn
    binds: ``SO_REUSEADDR``, no ``SO_REUSEPORT``, so a second instance on the port fails).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def exit_status(code: object) -> int:
    """The process exit status of ``SystemExit(code)`` (None: 0; an int: itself; else 1)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when ``parent`` dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: a supervisor's death leaves the worker
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


@dataclass(slots=True)
class _Slot:
    index: int
    pid: int | None = None
    started: float = 0.0         # monotonic start of the current worker
    failures: int = 0            # failures in a row (reset by a run of stable_s)
    restart_at: float | None = None
    last_status: int = 0         # exit status of the last worker (negative: its signal)


class Supervisor:
    """Fork ``workers`` processes running ``target(index)`` and keep them running.

    Args:
        name: the service name (logs).
        target: run in each forked worker with its index (0..workers-1); returns its exit
            status (a ``SystemExit`` it raises counts as its code). The worker process ends
            with it (``os._exit``), never returning into the supervisor.
        workers: how many (>= 1).
        stop_budget_s: seconds from forwarding SIGTERM until a remaining worker is SIGKILLed.
        backoff_s, backoff_max_s: the first restart delay and its cap, seconds (doubling).
        stable_s: a worker that ran this long before exiting restarts after ``backoff_s``.
        max_failures: failures in a row of one slot before the supervisor gives up.
        poll_s: how often exits are reaped, seconds.
    """

    def __init__(self, name: str, target: Callable[[int], int], workers: int, *,
                 stop_budget_s: float, backoff_s: float = 1.0, backoff_max_s: float = 30.0,
                 stable_s: float = 60.0, max_failures: int = 5, poll_s: float = 0.1) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.name = name
        self._target = target
        self._slots = [_Slot(i) for i in range(workers)]
        self.stop_budget_s = stop_budget_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.stable_s = stable_s
        self.max_failures = max_failures
        self.poll_s = poll_s
        self._signals: list[int] = []
        self._pid = os.getpid()

    # -- supervisor side ---------------------------------------------------------------
    def pids(self) -> dict[int, int]:
        """Worker index -> pid of the workers running now."""
        return {s.index: s.pid for s in self._slots if s.pid is not None}

    def run(self) -> int:
        """Fork the workers and supervise them until a signal or a give-up; the exit status."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in self._slots:
                self._spawn(slot)
            log.info("%s: supervisor %d running %d worker(s): %s", self.name, self._pid,
                     len(self._slots), ", ".join(str(p) for p in self.pids().values()))
            status = self._supervise()
            return self._stop_all(status)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: object) -> None:
        self._signals.append(sig)

    def _supervise(self) -> int | None:
        """Until a signal (None) or a give-up (its exit status)."""
        while not self._signals:
            status = self._reap(stopping=False)
            if status is not None:
                return status
            now = time.monotonic()
            for slot in self._slots:
                if slot.pid is None and slot.restart_at is not None and now >= slot.restart_at:
                    self._spawn(slot)
            time.sleep(self.poll_s)
        return None

    def _reap(self, *, stopping: bool) -> int | None:
        """Collect exited workers; schedule their restart unless ``stopping``. Returns the
        supervisor's exit status when it must give up, else None."""
        give_up: int | None = None
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return give_up
            if pid == 0:
                return give_up
            slot = next((s for s in self._slots if s.pid == pid), None)
            if slot is None:
                continue
            code = os.waitstatus_to_exitcode(wait_status)
            slot.pid = None
            slot.last_status = code
            if stopping:
                continue
            ran = time.monotonic() - slot.started
            how = f"status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
            if code == 2:
                log.error("%s: worker %d (pid %d) failed to start (%s); stopping every worker",
                          self.name, slot.index, pid, how)
                give_up = 2
                continue
            slot.failures = 1 if ran >= self.stable_s else slot.failures + 1
            if slot.failures > self.max_failures:
                log.error("%s: worker %d (pid %d) exited with %s after %.1f s, its %d failure in a "
                          "row; giving up and stopping every worker", self.name, slot.index, pid,
                          how, ran, slot.failures)
                give_up = give_up or 1
                continue
            delay = min(self.backoff_max_s, self.backoff_s * 2 ** (slot.failures - 1))
            slot.restart_at = time.monotonic() + delay
            log.error("%s: worker %d (pid %d) exited with %s after %.1f s; restarting it in %.1f s",
                      self.name, slot.index, pid, how, ran, delay)

    def _stop_all(self, status: int | None) -> int:
        """SIGTERM every worker, SIGKILL those left after the budget; the exit status."""
        forwarded = len(self._signals)
        self._kill(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_budget_s
        self._reap(stopping=True)
        while self.pids() and time.monotonic() < deadline:
            if len(self._signals) > forwarded:  # asked again: pass a second SIGINT on
                forwarded = len(self._signals)
                if self._signals[-1] == signal.SIGINT:
                    self._kill(signal.SIGINT)
            time.sleep(self.poll_s)
            self._reap(stopping=True)
        left = self.pids()
        if left:
            log.error("%s: worker(s) %s did not stop within %.0f s; killing them", self.name,
                      ", ".join(map(str, left.values())), self.stop_budget_s)
            self._kill(signal.SIGKILL)
            for pid in left.values():
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
            for slot in self._slots:
                slot.pid = None
            return 1
        if status is not None:
            return status
        failed = [s.index for s in self._slots if s.last_status != 0]
        if failed:
            log.error("%s: worker(s) %s did not stop cleanly", self.name, ", ".join(map(str, failed)))
            return 1
        log.info("%s: every worker stopped", self.name)
        return 0

    def _kill(self, sig: int) -> None:
        for pid in self.pids().values():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _spawn(self, slot: _Slot) -> None:
        # Block the stop signals across the fork: the child must not run the supervisor's
        # handlers before it has put the defaults back.
        blocked = {signal.SIGTERM, signal.SIGINT}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            pid = os.fork()
            if pid == 0:
                self._child(slot.index)  # never returns
            slot.pid, slot.started, slot.restart_at = pid, time.monotonic(), None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    # -- worker side -------------------------------------------------------------------
    def _child(self, index: int) -> None:
        status = 1
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.setpgid(0, 0)
            _die_with_parent(self._pid)
            status = self._target(index)
        except SystemExit as e:
            status = exit_status(e.code)
        except BaseException:  # noqa: BLE001 - the worker ends here whatever happened
            traceback.print_exc()
            status = 1
        finally:
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed stream: nothing left to say
                    pass
            os._exit(status)
