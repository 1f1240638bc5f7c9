"""Run the five casestream services as separate local processes.

Used by ``make run`` (foreground, logs prefixed by service, Ctrl-C stops all), by
``make demo`` and by the end-to-end tests, which also kill and restart single services.
Infrastructure (Kafka, PostgreSQL, registry, SMTP sink) is started separately by
``deploy/infra.sh up``; this module only runs the services, each as
``python -m services.<name>``, with the caller's environment.

    python -m casestream.service.devstack run     # foreground until Ctrl-C
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from casestream.errors import CasestreamError, ConfigError

SERVICE_PORTS: Mapping[str, int] = {
    "case": 18101,
    "audit": 18102,
    "saga": 18103,
    "decision": 18104,
    "notification": 18105,
}
"""Default HTTP port per service; each is overridable with CASESTREAM_<SVC>_PORT."""


class StackError(CasestreamError):
    """A service did not become ready, or exited while it was expected to run."""


def service_port(name: str, env: Mapping[str, str] | None = None) -> int:
    """The HTTP port of service ``name`` under ``env`` (default: this process's environment).

    Raises:
        ConfigError: ``CASESTREAM_<NAME>_PORT`` is not a port number (1-65535).
    """
    env = os.environ if env is None else env
    var = f"CASESTREAM_{name.upper()}_PORT"
    raw = env.get(var, SERVICE_PORTS[name])
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ConfigError(f"{var}={raw!r}: not a port number (1-65535)")
    return port


@dataclass(slots=True)
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    pump: threading.Thread | None = None


@dataclass(slots=True, kw_only=True)
class ServiceStack:
    """Start, stop, kill and restart the services as child processes.

    Attributes:
        env: environment for the children (CASESTREAM_* endpoints).
        log_dir: where each service's output goes (``<name>.log``), or None to print it to
            this process's stdout prefixed with ``[name]``.
        ready_timeout_s: seconds to wait for ``/readyz`` to answer 200 after a start.
    """

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    log_dir: Path | None = None
    ready_timeout_s: float = 90.0
    procs: dict[str, _Proc] = field(default_factory=dict)

    def start(self, name: str) -> None:
        """Start service ``name`` (no-op if it is running) and wait until it is ready.

        Raises:
            StackError: it exited or did not answer ``/readyz`` with 200 in time.
        """
        running = self.procs.get(name)
        if running and running.popen.poll() is None:
            return
        port = service_port(name, self.env)
        if _port_in_use(port):
            raise StackError(
                f"port {port} for service {name} is already in use (another casestream stack "
                f"running? `make infra-down` does not stop services); set "
                f"CASESTREAM_{name.upper()}_PORT or stop that process")
        cmd = [sys.executable, "-m", f"services.{name}"]
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
            popen = subprocess.Popen(cmd, env=dict(self.env), stdout=out, stderr=subprocess.STDOUT)
            out.close()
            self.procs[name] = _Proc(name, popen)
        else:
            popen = subprocess.Popen(cmd, env=dict(self.env), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
            pump = threading.Thread(target=_pump, args=(name, popen), daemon=True)
            pump.start()
            self.procs[name] = _Proc(name, popen, pump)

    def wait_ready(self, names: list[str] | None = None) -> None:
        """Wait until every named (default: every started) service answers ``/readyz`` 200.

        Raises:
            StackError: a service exited, or was not ready within ``ready_timeout_s``.
        """
        names = list(self.procs) if names is None else names
        deadline = time.monotonic() + self.ready_timeout_s
        pending = set(names)
        last_error: dict[str, str] = {}
        while pending:
            for name in sorted(pending):
                proc = self.procs[name].popen
                if proc.poll() is not None:
                    raise StackError(f"service {name} exited with status {proc.returncode}"
                                     f"{self._log_hint(name)}")
                url = f"http://127.0.0.1:{service_port(name, self.env)}/readyz"
                try:
                    if httpx.get(url, timeout=2.0).status_code == 200:
                        pending.discard(name)
                except httpx.HTTPError as e:
                    last_error[name] = str(e)
            if pending and time.monotonic() > deadline:
                details = "; ".join(f"{n}: {last_error.get(n, 'not ready')}" for n in sorted(pending))
                raise StackError(f"not ready after {self.ready_timeout_s:.0f} s: {details}")
            if pending:
                time.sleep(0.2)

    def register_schemas(self) -> None:
        """Register the schema catalog once, explicitly, as a deployment would.

        Five services each registering at start would race on a fresh registry; with the
        catalog registered first, their start-up only looks ids up.

        Raises:
            StackError: ``casestream schemas register`` failed (its output is included).
        """
        cmd = [sys.executable, "-c", "from casestream.cli import main; main()",
               "schemas", "register"]
        if "CASESTREAM_REGISTRY_URL" in self.env:
            cmd += ["--registry", self.env["CASESTREAM_REGISTRY_URL"]]
        done = subprocess.run(cmd, env=dict(self.env), capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"schema registration failed: {done.stdout}{done.stderr}".strip())

    def start_all(self, names: list[str] | None = None) -> None:
        """Register the schemas, start every service (default: all five), wait until all are ready."""
        names = list(SERVICE_PORTS) if names is None else names
        self.register_schemas()
        for name in names:
            self.start(name)
        self.wait_ready(names)

    def kill(self, name: str) -> None:
        """SIGKILL service ``name`` (a crash: no flush, no commit) and reap it."""
        proc = self.procs[name].popen
        proc.kill()
        proc.wait(10)

    def stop(self, name: str, timeout_s: float = 30.0) -> int:
        """SIGTERM service ``name``, wait up to ``timeout_s`` s (then SIGKILL); return its status."""
        proc = self.procs[name].popen
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return proc.returncode

    def stop_all(self) -> None:
        """Stop every service started by this stack (SIGTERM to all, then wait)."""
        for proc in self.procs.values():
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for name in list(self.procs):
            self.stop(name)

    def _log_hint(self, name: str) -> str:
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{name}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            return ""
        return f"; last lines of {path}:\n" + "\n".join(tail)


def _port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _pump(name: str, proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    width = max(map(len, SERVICE_PORTS))
    for raw in proc.stdout:
        sys.stdout.write(f"[{name:<{width}}] {raw.decode(errors='replace')}")
        sys.stdout.flush()


@contextmanager
def running_stack(**kwargs: object) -> Iterator[ServiceStack]:
    """Context manager: all five services started and ready inside, stopped on exit."""
    stack = ServiceStack(**kwargs)  # type: ignore[arg-type]
    try:
        stack.start_all()
        yield stack
    finally:
        stack.stop_all()


def _run_foreground() -> int:
    stack = ServiceStack()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        stack.start_all()
        print("all five services ready; Ctrl-C stops them", flush=True)
        while not stopping.is_set():
            for proc in stack.procs.values():
                if proc.popen.poll() is not None:
                    print(f"service {proc.name} exited with status {proc.popen.returncode}",
                          file=sys.stderr)
                    return 1
            stopping.wait(0.5)
    except KeyboardInterrupt:
        pass
    except StackError as e:
        print(f"run: {e}", file=sys.stderr)
        return 1
    finally:
        stack.stop_all()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["run"]:
        print("usage: python -m casestream.service.devstack run", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(_run_foreground())
