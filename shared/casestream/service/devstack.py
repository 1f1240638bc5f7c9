"""Run discovered services as separate local processes.

Services are those installed under the entry point group ``casestream.services``
(:func:`casestream.service.discovery.services`); each runs as ``python -m <spec.module>``
with the caller's environment, on its port (:meth:`ServiceSpec.port`:
``CASESTREAM_<NAME>_PORT`` or its settings' default). Used by ``make run`` (foreground, logs
prefixed by service, Ctrl-C stops all), by ``make demo`` and by the end-to-end tests, which
also kill and restart single services. Before the services start, every installed schemas
folder (entry point group ``casestream.schemas``: the suite's, each team's) is registered
(:func:`installed_schema_folders`; a subject two folders define differently stops it), the
missing topics every installed service declares are created (``casestream topics apply
--missing-only``), and each service's database is created when missing. Infrastructure
(Kafka, PostgreSQL, registry, SMTP sink) is started separately by ``deploy/infra.sh up``.

    python -m casestream.service.devstack run [--services case,audit]   # until Ctrl-C

Without ``--services`` the ``CASESTREAM_RUN_SERVICES`` variable (comma-separated names)
chooses; without either, every discovered service runs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from casestream.errors import CasestreamError, ConfigError
from casestream.service.discovery import services as discover_services
from casestream.service.spec import ServiceSpec

if TYPE_CHECKING:
    from casestream.events.catalog import Catalog, SubjectSpec

#: Comma-separated service names ``make run`` starts (default: every discovered service).
RUN_SERVICES_VAR = "CASESTREAM_RUN_SERVICES"

#: Port distance between two local instances of one service: instance ``i`` (1-based) listens
#: on its service's port + ``REPLICA_PORT_STEP * (i - 1)`` (case: 18101, 18201, 18301, ...).
REPLICA_PORT_STEP = 100


class StackError(CasestreamError):
    """A service did not become ready, or exited while it was expected to run."""


def _spec(name: str, specs: Mapping[str, ServiceSpec] | None = None) -> ServiceSpec:
    specs = discover_services() if specs is None else specs
    try:
        return specs[name]
    except KeyError:
        raise ConfigError(f"unknown service {name!r}; discovered: "
                          f"{', '.join(specs) or 'none installed'}") from None


def service_port(name: str, env: Mapping[str, str] | None = None,
                 specs: Mapping[str, ServiceSpec] | None = None) -> int:
    """The HTTP port of discovered service ``name`` under ``env`` (default: this process's
    environment), :meth:`ServiceSpec.port`; ``specs`` default the discovered services.

    Raises:
        ConfigError: unknown service, or ``CASESTREAM_<NAME>_PORT`` is not a port number.
    """
    return _spec(name, specs).port(env)


def replica_env(names: Sequence[str], index: int, env: Mapping[str, str] | None = None,
                specs: Mapping[str, ServiceSpec] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) for local instance ``index`` (1-based) of
    the services ``names``: ``CASESTREAM_<NAME>_PORT`` moved by :data:`REPLICA_PORT_STEP`
    per instance; every other variable (databases, consumer groups, Kafka) is the same, so
    the instances share their service's database, consumer groups and outbox shards. Index 1
    is ``env`` unchanged. One :class:`ServiceStack` per index runs that instance of each.

    Raises:
        ConfigError: ``index`` < 1, an unknown service, or a port past 65535.
    """
    env = dict(os.environ if env is None else env)
    if index < 1:
        raise ConfigError(f"replica index must be >= 1, got {index}")
    if index == 1:
        return env
    for name in names:
        port = service_port(name, env, specs) + REPLICA_PORT_STEP * (index - 1)
        if port > 65535:
            raise ConfigError(f"service {name}: instance {index} would listen on port {port}"
                              f" (> 65535); lower CASESTREAM_{name.upper()}_PORT")
        env[f"CASESTREAM_{name.upper()}_PORT"] = str(port)
    return env


def selected_services(names: str | Sequence[str] | None = None,
                      specs: Mapping[str, ServiceSpec] | None = None,
                      env: Mapping[str, str] | None = None) -> list[str]:
    """The services to run: ``names`` (comma-separated text or a sequence), else
    :data:`RUN_SERVICES_VAR` of ``env``, else every discovered service (sorted).

    Raises:
        ConfigError: a name is not a discovered service (the message lists them).
    """
    specs = discover_services() if specs is None else specs
    env = os.environ if env is None else env
    chosen = env.get(RUN_SERVICES_VAR) if names is None else names
    if chosen is None or (isinstance(chosen, str) and not chosen.strip()):
        return list(specs)
    wanted = [n.strip() for n in chosen.split(",")] if isinstance(chosen, str) else list(chosen)
    wanted = [n for n in wanted if n]
    for name in wanted:
        _spec(name, specs)
    return list(dict.fromkeys(wanted))


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
        specs: the services it may run, by name (default: the discovered ones).
    """

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    log_dir: Path | None = None
    ready_timeout_s: float = 90.0
    procs: dict[str, _Proc] = field(default_factory=dict)
    specs: Mapping[str, ServiceSpec] = field(default_factory=discover_services)

    def _port(self, name: str) -> int:
        return service_port(name, self.env, self.specs)

    def _provision(self, spec: ServiceSpec) -> None:
        """Create ``spec``'s database if missing, as the child's environment names it
        (``CASESTREAM_PG_URL`` + ``CASESTREAM_<NAME>_DATABASE``, else the settings' default),
        so an installed service runs locally without a provisioning step of its own.

        Raises:
            StackError: the database cannot be created.
        """
        # lazy (start-up cost): psycopg and the service's settings class load only to start one
        from casestream.migrations import create_database
        from casestream.service.settings import CommonSettings

        fields = getattr(spec.settings_class(), "model_fields", {})
        database = self.env.get(f"CASESTREAM_{spec.name.upper()}_DATABASE") or getattr(
            fields.get("database"), "default", None)
        if not isinstance(database, str) or not database:
            return  # a service without a database of its own
        pg_url = self.env.get("CASESTREAM_PG_URL") or CommonSettings.model_fields["pg_url"].default
        try:
            create_database(CommonSettings(pg_url=pg_url).database_url(database))
        except ConfigError as e:
            raise StackError(f"service {spec.name}: {e}") from e

    def start(self, name: str) -> None:
        """Start service ``name`` (no-op if it is running) and wait until it is ready.

        Raises:
            StackError: it exited or did not answer ``/readyz`` with 200 in time.
        """
        running = self.procs.get(name)
        if running and running.popen.poll() is None:
            return
        spec = _spec(name, self.specs)
        port = self._port(name)
        if _port_in_use(port):
            raise StackError(
                f"port {port} for service {name} is already in use (another casestream stack "
                f"running? `make infra-down` does not stop services); set "
                f"CASESTREAM_{name.upper()}_PORT or stop that process")
        self._provision(spec)
        cmd = [sys.executable, "-m", spec.module]
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
            popen = subprocess.Popen(cmd, env=dict(self.env), stdout=out, stderr=subprocess.STDOUT)
            out.close()
            self.procs[name] = _Proc(name, popen)
        else:
            popen = subprocess.Popen(cmd, env=dict(self.env), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
            width = max(map(len, self.specs), default=len(name))
            pump = threading.Thread(target=_pump, args=(name, popen, width), daemon=True)
            pump.start()
            self.procs[name] = _Proc(name, popen, pump)

    def wait_ready(self, names: list[str] | None = None) -> None:
        """Wait until every named (default: every started) service answers ``/readyz`` and
        ``/readyz/consumers`` 200: it takes commands and its consumers hold their partitions
        (a test may then rely on what it publishes being consumed by the live group).

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
                url = f"http://127.0.0.1:{self._port(name)}/readyz"
                try:
                    answers = [httpx.get(u, timeout=2.0) for u in (url, url + "/consumers")]
                    if all(r.status_code == 200 for r in answers):
                        pending.discard(name)
                    else:
                        last_error[name] = "; ".join(f"{r.url.path}: {r.text[:200]}" for r in answers
                                                     if r.status_code != 200)
                except httpx.HTTPError as e:
                    last_error[name] = str(e)
            if pending and time.monotonic() > deadline:
                details = "; ".join(f"{n}: {last_error.get(n, 'not ready')}" for n in sorted(pending))
                raise StackError(f"not ready after {self.ready_timeout_s:.0f} s: {details}")
            if pending:
                time.sleep(0.2)

    def register_schemas(self) -> None:
        """Register every installed schemas folder (entry point group ``casestream.schemas``:
        the suite's, each team's) once, explicitly, as a deployment would; nothing is read from
        the working directory.

        Several services each registering at start would race on a fresh registry; with
        the catalogs registered first, their start-up only looks ids up. A subject that two
        folders define differently is refused before anything is registered.

        Raises:
            StackError: a folder does not load, two folders define one subject differently
                (one line naming the subject and both folders), or ``casestream schemas
                register`` failed for a folder (its output is included).
        """
        folders = installed_schema_folders()
        registry = self.env.get("CASESTREAM_REGISTRY_URL")
        if registry is None:
            # lazy (start-up cost): pydantic loads only to start a stack
            from casestream.service.settings import CommonSettings

            registry = CommonSettings.model_fields["registry_url"].default
        for name, folder in folders.items():
            cmd = [sys.executable, "-c", "from casestream.cli import main; main()",
                   "schemas", "register", "--schemas-dir", str(folder), "--registry", str(registry)]
            done = subprocess.run(cmd, env=dict(self.env), capture_output=True, text=True)
            if done.returncode != 0:
                raise StackError(f"schema registration of {name} ({folder}) failed: "
                                 f"{done.stdout}{done.stderr}".strip())

    def create_topics(self) -> None:
        """Create the missing topics every installed service declares (``ServiceSpec.topics``)
        with ``casestream topics apply --missing-only``, as a deployment does before starting
        its services: a consumer then finds its topics, and a relay writes to topics with
        their declared partitions and retention rather than ones the broker auto-creates.
        Existing topics are left as they are (``casestream topics plan|apply`` changes them).

        Raises:
            StackError: two installed services declare one topic, or Kafka refused or did not
                answer; the command's output is included.
        """
        cmd = [sys.executable, "-c", "from casestream.cli import main; main()", "topics",
               "apply", "--missing-only"]
        done = subprocess.run(cmd, env=dict(self.env), capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"creating the declared topics failed: {done.stdout}{done.stderr}".strip())
        for line in done.stdout.splitlines():
            if line.startswith(("created topic", "topic ")):
                print(line, flush=True)

    def start_all(self, names: Sequence[str] | None = None) -> None:
        """Register the schemas, create the declared topics (:meth:`create_topics`), start the
        named services (default: every one in ``specs``), wait until all are ready.

        Raises:
            ConfigError: a name is not in ``specs``.
            StackError: as :meth:`start` and :meth:`wait_ready`.
        """
        names = list(self.specs) if names is None else list(names)
        for name in names:
            _spec(name, self.specs)
        self.register_schemas()
        self.create_topics()
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


def installed_schema_folders() -> dict[str, Path]:
    """Name -> folder of every installed schemas folder (entry point group
    ``casestream.schemas``), sorted by name, checked to define each subject once: a subject in
    two folders must be the same there (topic, compatibility, versions and every version's
    schema), else neither can be registered.

    Raises:
        StackError: a folder does not resolve or load, or a subject is defined differently in
            two folders (one line naming the subject and both folders).
    """
    # lazy (start-up cost): the catalog loader only when a stack starts
    from casestream.errors import SchemaError
    from casestream.events.catalog import load_catalog
    from casestream.service.discovery import schema_folder, schema_folder_refs

    seen: dict[str, tuple[tuple[object, ...], Path]] = {}
    folders: dict[str, Path] = {}
    try:
        for name in schema_folder_refs():
            folder = folders[name] = schema_folder(name)
            catalog = load_catalog(folder)
            for subject, spec in catalog.subjects.items():
                definition = _definition(catalog, spec)
                first = seen.setdefault(subject, (definition, folder))
                if first[0] != definition:
                    raise StackError(f"subject {subject} is defined differently in {first[1]} and in "
                                     f"{folder}: one team owns a subject; remove it from one folder")
    except (ConfigError, SchemaError) as e:
        raise StackError(f"schemas folders: {e}") from e
    return folders


def _definition(catalog: Catalog, spec: SubjectSpec) -> tuple[object, ...]:
    """What must be equal for one subject found in two folders."""
    import json

    schemas = tuple(json.dumps(catalog.versions[(spec.event_type, v)].schema, sort_keys=True)
                    for v in spec.versions)
    return (spec.event_type, spec.topic, spec.compatibility, spec.versions, schemas)


def _port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _pump(name: str, proc: subprocess.Popen[bytes], width: int) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        sys.stdout.write(f"[{name:<{width}}] {raw.decode(errors='replace')}")
        sys.stdout.flush()


@contextmanager
def running_stack(names: Sequence[str] | None = None, **kwargs: object) -> Iterator[ServiceStack]:
    """Context manager: the named services (default: every discovered one) started and ready
    inside, stopped on exit; ``kwargs`` go to :class:`ServiceStack`."""
    stack = ServiceStack(**kwargs)  # type: ignore[arg-type]
    try:
        stack.start_all(names)
        yield stack
    finally:
        stack.stop_all()


CONSOLE_PORT = 18100
"""``casestream console``'s default port (``ConsoleSettings.port``; not imported: the console
package builds on this one)."""
CONSOLE_HINT = "sign in with a token: casestream token --tenant tenant-a --role supervisor --role operator"


@contextmanager
def console_process(*, env: Mapping[str, str] | None = None, log_dir: Path | None = None,
                    timeout_s: float = 30.0) -> Iterator[str]:
    """Context manager: ``casestream console`` as a child process, answering ``/healthz``
    inside (yields its base URL), stopped on exit. Its settings come from ``env``
    (``CASESTREAM_CONSOLE_*``; default this process's environment).

    Raises:
        StackError: it did not answer within ``timeout_s`` (its log is named).
    """
    environ = dict(os.environ if env is None else env)
    port = int(environ.get("CASESTREAM_CONSOLE_PORT") or CONSOLE_PORT)
    base = f"http://127.0.0.1:{port}"
    out = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        out = open(log_dir / "console.log", "wb")  # noqa: SIM115 - closed below
    popen = subprocess.Popen([sys.executable, "-m", "casestream", "console"], env=environ,
                             stdout=out if out is not None else None, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if popen.poll() is not None or time.monotonic() > deadline:
                raise StackError(f"the console did not answer on {base} within {timeout_s:.0f} s"
                                 + (f" (log: {log_dir / 'console.log'})" if log_dir else ""))
            time.sleep(0.2)
        yield base
    finally:
        popen.terminate()
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
        if out is not None:
            out.close()


def ready_message(names: Sequence[str]) -> str:
    """The line ``make run`` prints once ``names`` are ready, counting them."""
    count = "the one service" if len(names) == 1 else f"all {len(names)} services"
    return f"{count} ready ({', '.join(names)}); Ctrl-C stops them"


def _run_foreground(names: Sequence[str], *, console: bool = True) -> int:
    stack = ServiceStack()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with ExitStack() as later:
        try:
            if not names:
                print("run: no services installed (entry point group casestream.services)",
                      file=sys.stderr)
                return 1
            stack.start_all(names)
            print(ready_message(names), flush=True)
            if console:
                base = later.enter_context(console_process(log_dir=stack.log_dir))
                print(f"console: {base} ({CONSOLE_HINT})", flush=True)
            return _watch(stack, stopping)
        except KeyboardInterrupt:
            return 0
        except StackError as e:
            print(f"run: {e}", file=sys.stderr)
            return 1
        finally:
            later.close()
            stack.stop_all()


def _watch(stack: ServiceStack, stopping: threading.Event) -> int:
    """Until ``stopping`` (or Ctrl-C): 1 as soon as a service exits, else 0."""
    try:
        while not stopping.is_set():
            for proc in stack.procs.values():
                if proc.popen.poll() is not None:
                    print(f"service {proc.name} exited with status {proc.popen.returncode}",
                          file=sys.stderr)
                    return 1
            stopping.wait(0.5)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m casestream.service.devstack run [--services a,b]``; the exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m casestream.service.devstack",
        description="Run discovered casestream services as local processes until Ctrl-C.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="start the services, print their output prefixed by name",
        description=f"Start services in the foreground. Which: --services, else "
                    f"{RUN_SERVICES_VAR} (comma-separated), else every discovered service "
                    f"(entry point group casestream.services).")
    run.add_argument("--services", metavar="NAMES", default=None,
                     help=f"comma-separated service names (default ${RUN_SERVICES_VAR} or all)")
    run.add_argument("--no-console", action="store_true",
                     help="do not start the operations console (casestream console, port "
                          "CASESTREAM_CONSOLE_PORT, default 18100)")
    args = parser.parse_args(argv)
    try:
        names = selected_services(args.services)
    except ConfigError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    return _run_foreground(names, console=not args.no_console)


if __name__ == "__main__":
    raise SystemExit(main())
