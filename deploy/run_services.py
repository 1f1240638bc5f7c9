"""Run the casestream services as separate processes in the foreground (`make run`).

Usage: python deploy/run_services.py [SERVICE ...]    (default: case decision audit notification saga)

Each service runs as ``<python> -m services.<name>`` with this process's environment (``make run``
exports the ``CASESTREAM_*`` endpoints of ``deploy/infra.sh env``). Every output line is
prefixed with the service name (coloured on a terminal). A service whose package has no
``__main__.py`` yet is reported and skipped.

Stopping: Ctrl-C / SIGTERM sends SIGTERM to every service, waits up to 15 s, then SIGKILLs the
rest. If one service exits on its own, the others are stopped too (exit status 1), as with
foreman/honcho: a half-running suite is worse than a stopped one.
Exit status: 0 after a requested stop, 1 if a service died, 2 if there was nothing to run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SERVICES = ("case", "decision", "audit", "notification", "saga")
COLOURS = ("36", "33", "35", "32", "34", "31")
STOP_GRACE_S = 15.0


class Supervisor:
    """Starts the services, pumps their output with prefixes, stops them all together."""

    def __init__(self, names: list[str], python: str) -> None:
        self.names = names
        self.python = python
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.width = max(len(n) for n in names)
        self.tty = sys.stdout.isatty()
        self.lock = threading.Lock()
        self.stop_requested = threading.Event()

    def emit(self, name: str, line: str) -> None:
        tag = f"{name:<{self.width}} |"
        if self.tty:
            colour = COLOURS[self.names.index(name) % len(COLOURS)] if name in self.names else "0"
            tag = f"\x1b[{colour}m{tag}\x1b[0m"
        with self.lock:
            sys.stdout.write(f"{tag} {line}\n")
            sys.stdout.flush()

    def _pump(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.emit(name, raw.decode("utf-8", "replace").rstrip("\n"))

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for name in self.names:
            proc = subprocess.Popen(
                [self.python, "-m", f"services.{name}"], cwd=REPO, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us only; we stop the children in order
            )
            self.procs[name] = proc
            threading.Thread(target=self._pump, args=(name, proc), daemon=True).start()
            self.emit(name, f"-- started (pid {proc.pid})")

    def watch(self) -> int:
        """Block until a stop is requested (0) or a service exits on its own (1)."""
        while not self.stop_requested.wait(0.2):
            for name, proc in self.procs.items():
                code = proc.poll()
                if code is not None:
                    self.emit(name, f"-- exited with status {code}; stopping the other services")
                    return 1
        return 0

    def stop_all(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                self.emit(name, "-- stopping (SIGTERM)")
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.emit(name, f"-- did not stop within {STOP_GRACE_S:.0f} s, SIGKILL")
                proc.kill()
                proc.wait()
            self.emit(name, f"-- stopped (status {proc.returncode})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run casestream services in the foreground.")
    p.add_argument("services", nargs="*", default=list(DEFAULT_SERVICES))
    p.add_argument("--python", default=sys.executable, help="interpreter for the services")
    a = p.parse_args(argv)
    names = []
    for name in a.services:
        if not (REPO / "services" / name / "__main__.py").is_file():
            print(f"run: services/{name}/__main__.py does not exist yet, skipping {name}", file=sys.stderr)
            continue
        names.append(name)
    if not names:
        print("run: no service to run", file=sys.stderr)
        return 2
    sup = Supervisor(names, a.python)

    def on_signal(signum: int, _frame: object) -> None:
        sup.stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sup.start()
    status = sup.watch()
    sup.stop_all()
    return status


if __name__ == "__main__":
    sys.exit(main())
