"""Import rules, checked on the source (AST; nothing is imported):

(a) services/ (and examples/, and the suite's contracts in schemas/) import casestream only
    through package names; examples/ and the contracts import nothing from the suite;
(b) each driver is imported only by the library modules that own it, and in services/ only
    by adapters/ and bootstrap.py;
(c) the casestream packages do not import each other in a cycle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "shared" / "casestream"
CLIENTS = [d for d in (ROOT / "services", ROOT / "examples", ROOT / "schemas") if d.is_dir()]


def _module_name(path: Path) -> str:
    base = ROOT / "shared" if path.is_relative_to(LIBRARY) else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(module: str) -> bool:
    return (ROOT / "shared" / Path(*module.split(".")) / "__init__.py").is_file()


def _is_module(module: str) -> bool:
    rel = Path(*module.split("."))
    return _is_package(module) or (ROOT / "shared" / rel.with_suffix(".py")).is_file()


def _imports(path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(module, imported names, line) for every absolute import, at any nesting level."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [a.name for a in node.names], node.lineno


def _files(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in sorted(d.rglob("*.py"))]


# -- (a) services import package names only ------------------------------------------------
# Allowed: casestream.<package> and the root modules (casestream.errors, casestream.migrations,
# casestream.clock, casestream.refs, casestream.retry); not casestream.<package>.<module>.

#: Submodules a package publishes as a namespace (listed in its ``__all__``), with the reason.
NAMESPACE_MODULES: dict[tuple[str, str], str] = {}


def _submodule_uses(path: Path) -> list[str]:
    bad = []
    for module, names, line in _imports(path):
        if module != "casestream" and not module.startswith("casestream."):
            continue
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
        if module.count(".") > 1 and not _is_package(module):  # root modules (errors) are top-level names
            bad.append(f"{where}: {module} is a module, import from its package")
            continue
        for name in names:
            sub = f"{module}.{name}"
            if module != "casestream" and _is_module(sub) and (module, name) not in NAMESPACE_MODULES:
                bad.append(f"{where}: from {module} import {name} (a submodule)")
    return bad


def test_clients_import_casestream_through_packages_only() -> None:
    bad = [b for p in _files(*CLIENTS) for b in _submodule_uses(p)]
    assert not bad, "\n".join(bad)


def test_the_client_rule_sees_a_submodule_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from casestream.events.codec import EnvelopeCodec\n"
                     "from casestream.events import codec\nfrom casestream.events import Envelope\n")
    assert len(_submodule_uses(probe)) == 2


# Handler and projection names come from the authoring package alone, in services, examples,
# the generated skeleton and the docs (casestream.consumer and casestream.replay are engines).
AUTHORING_NAMES = {
    "AggregateState", "DiscardingOutbox", "FirstSeenPolicy", "HandlerContext", "HandlerKind",
    "HandlerRegistry", "OutboxAppender", "ProcessingMode", "RegisteredHandler", "Verdict", "decide",
    "ProjectionSpec", "TableNames", "create_table_unless_exists", "insert_batch_registry",
    "json_batch_registry", "max_applied_at",
}
SCAFFOLD = LIBRARY / "scaffold" / "templates"
_FROM_IMPORT = re.compile(r"\s*from\s+(casestream(?:\.\w+)*)\s+import\s+\(?([^)]*?)\)?\s*\Z", re.DOTALL)


def _authoring_uses(path: Path) -> list[str]:
    """Imports of an authoring name from anywhere but casestream.handlers, in Python source,
    a template or the code blocks of a Markdown page (read as text: templates do not parse)."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bad = []
    for statement in re.finditer(r"^[ \t]*from[ \t]+casestream[\w.]*[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)",
                                 text, re.MULTILINE):
        m = _FROM_IMPORT.match(statement.group(0))
        if m is None or m.group(1) == "casestream.handlers" or m.group(1).startswith("casestream.handlers."):
            continue
        names = {n.strip().split(" as ")[0] for n in m.group(2).replace("\n", ",").split(",")}
        for name in sorted(names & AUTHORING_NAMES):
            line = text.count("\n", 0, statement.start()) + 1
            bad.append(f"{where}:{line}: {name} from {m.group(1)} (import it from casestream.handlers)")
    return bad


def _authoring_files() -> list[Path]:
    files = [p for d in (ROOT / "services", ROOT / "examples") for p in sorted(d.rglob("*.py"))]
    files += sorted(SCAFFOLD.rglob("*.tmpl")) + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    return files


def test_services_examples_skeleton_and_docs_import_authoring_names_from_casestream_handlers() -> None:
    files = _authoring_files()
    assert any(p.suffix == ".tmpl" for p in files) and any(p.suffix == ".md" for p in files)
    bad = [b for p in files for b in _authoring_uses(p)]
    assert not bad, "\n".join(bad)


def test_the_authoring_rule_sees_an_engine_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py.tmpl"
    probe.write_text("from casestream.consumer import HandlerRegistry, ConsumerSettings\n"
                     "from casestream.replay import (\n    ProjectionSpec,\n    Replayer,\n)\n"
                     "from casestream.handlers import HandlerKind\n"
                     "    from casestream.consumer.handlers import HandlerContext as Ctx\n")
    assert [b.split(": ", 1)[1] for b in _authoring_uses(probe)] == [
        "HandlerRegistry from casestream.consumer (import it from casestream.handlers)",
        "ProjectionSpec from casestream.replay (import it from casestream.handlers)",
        "HandlerContext from casestream.consumer.handlers (import it from casestream.handlers)",
    ]


# A team's package gets the suite's schemas through discovery (casestream.service.schema_folder),
# never by importing the suite's package `services`.
def _suite_uses(path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{line}: imports {module} (the suite's package)"
            for module, _, line in _imports(path) if module == "services" or module.startswith("services.")]


def test_examples_import_nothing_from_the_suite() -> None:
    bad = [b for p in _files(ROOT / "examples") for b in _suite_uses(p)]
    assert not bad, "\n".join(bad)


# The suite's contracts (distribution casestream-suite-schemas) are installed without the suite.
def test_the_contracts_import_nothing_from_the_suite() -> None:
    files = _files(ROOT / "schemas")
    assert files
    bad = [b for p in files for b in _suite_uses(p)]
    assert not bad, "\n".join(bad)


def test_the_suite_rule_sees_a_suite_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from services import schemas_dir\nimport services.case\nimport servicesx\n")
    assert len(_suite_uses(probe)) == 2


# -- (b) drivers are imported by their owners only ------------------------------------------

#: Library modules (exact names; a trailing ".*" covers a package) allowed to import each driver.
DRIVER_OWNERS: dict[str, set[str]] = {
    "confluent_kafka": {
        "casestream.kafka.*",
        "casestream.outbox.relay.batch", "casestream.outbox.relay.classify", "casestream.outbox.relay.core",
        "casestream.consumer.runtime", "casestream.consumer.deadletters",
        "casestream.events.registry",            # the schema-registry client
        "casestream.replay.source", "casestream.replay.status",
        "casestream.telemetry.core", "casestream.telemetry.readiness",
        "casestream.cli.dlq", "casestream.cli.status",
        "casestream.outbox.switch",            # waits for its marker on the topic
        "casestream.operations.actions", "casestream.operations.flow",
        "casestream.testing.*",
    },
    "psycopg": {
        "casestream.migrations",
        "casestream.outbox.writer", "casestream.outbox.relay.__main__", "casestream.outbox.relay.core",
        "casestream.outbox.relay.leases", "casestream.outbox.relay.store",
        "casestream.consumer.batch_fast", "casestream.consumer.failures", "casestream.consumer.retention",
        "casestream.handlers.cursors",          # the handlers' shared cursor (a psycopg.Cursor)
        "casestream.http.pgdeadline", "casestream.http.pgidempotency",
        "casestream.replay.checkpoint", "casestream.replay.engine", "casestream.replay.parallel",
        "casestream.replay.lease",               # the replay_lease row (one replay per projection)
        "casestream.replay.names",
        "casestream.handlers.projection",        # psycopg.sql: max_applied_at's identifiers
        "casestream.replay.status",
        "casestream.service.settings",           # psycopg.conninfo: DSN parsing
        "casestream.service.builder",
        "casestream.outbox.admin", "casestream.outbox.cdc", "casestream.outbox.switch",
        "casestream.operations.replays",         # replay_history of the projection databases
        "casestream.testing.*",
    },
    "psycopg_pool": {
        "casestream.http.pgdeadline", "casestream.outbox.relay.core", "casestream.service.builder",
        "casestream.testing.*",
    },
    "starlette": {"casestream.http.*", "casestream.telemetry.http", "casestream.service.process",
                  "casestream.console.*"},
    "fastavro": {"casestream.events.codec", "casestream.schemacheck.compat"},
    "uvicorn": {"casestream.service.process", "casestream.console.*"},
}
#: Drivers a service may import itself (in adapters/ and bootstrap.py only); the others go
#: through casestream.
SERVICE_DRIVERS = {"psycopg", "psycopg_pool", "starlette"}


def _owns(module: str, owners: set[str]) -> bool:
    return any(module == o or (o.endswith(".*") and module.startswith(o[:-1])) for o in owners)


def _driver_violations(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        name = _module_name(path)
        parts = path.relative_to(ROOT).parts
        for module, _, line in _imports(path):
            driver = module.split(".")[0]
            if driver not in DRIVER_OWNERS:
                continue
            where = f"{path.relative_to(ROOT)}:{line}: {module}"
            if name.startswith("casestream"):
                if not _owns(name, DRIVER_OWNERS[driver]):
                    bad.append(f"{where} (not an owner of {driver})")
            elif parts[0] == "services":
                in_edge = len(parts) > 2 and (parts[2] == "adapters" or parts[2] == "bootstrap.py")
                if driver not in SERVICE_DRIVERS or not in_edge:
                    bad.append(f"{where} (services import {driver} only in adapters/ and bootstrap.py)"
                               if driver in SERVICE_DRIVERS else f"{where} (services use {driver} through casestream)")
    return bad


def test_drivers_are_imported_only_by_their_owners() -> None:
    bad = _driver_violations(_files(LIBRARY, *CLIENTS))
    assert not bad, "\n".join(bad)


def test_every_owner_entry_still_imports_its_driver() -> None:
    """Keeps the allowlist tight: an entry whose module no longer needs the driver goes."""
    used: dict[str, set[str]] = {d: set() for d in DRIVER_OWNERS}
    for path in _files(LIBRARY):
        for module, _, _ in _imports(path):
            if module.split(".")[0] in used:
                used[module.split(".")[0]].add(_module_name(path))
    stale = [f"{d}: {o}" for d, owners in DRIVER_OWNERS.items() for o in owners
             if not o.endswith(".*") and o not in used[d]]
    assert not stale, "allowlisted but no longer importing the driver:\n" + "\n".join(stale)


# -- (c) no import cycle between packages ----------------------------------------------------

#: Package-level edges that close a cycle today, each with its reason. Empty: there are none.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    """The package (``casestream.events``) or root module (``casestream.errors``) of ``module``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def package_graph() -> dict[str, set[str]]:
    """Edges between casestream packages from every import (module level, function level and
    TYPE_CHECKING alike). ``__main__`` modules are left out: they are entry points that
    nothing imports (``schemacheck/__main__`` runs the CLI's ``schemas`` group)."""
    graph: dict[str, set[str]] = {}
    for path in _files(LIBRARY):
        if path.name == "__main__.py":
            continue
        src = _unit(_module_name(path))
        graph.setdefault(src, set())
        for module, names, _ in _imports(path):
            if module != "casestream" and not module.startswith("casestream."):
                continue
            targets = [f"{module}.{n}" for n in names] if module == "casestream" else [module]
            for target in targets:
                dst = _unit(target)
                if dst != src and dst != "casestream":
                    graph[src].add(dst)
    for edge in KNOWN_CYCLE_EDGES:
        graph.get(edge[0], set()).discard(edge[1])
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_has_the_packages() -> None:
    graph = package_graph()
    assert "casestream.events" in graph["casestream.consumer"]
    assert "casestream.outbox" in graph["casestream.service"]


def test_packages_import_each_other_without_cycles() -> None:
    cycle = find_cycle(package_graph())
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or [])


def test_find_cycle_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


#: Library packages whose modules import each other without a cycle (TYPE_CHECKING included).
ACYCLIC_PACKAGES = ("casestream.consumer", "casestream.replay", "casestream.handlers")


def module_graph(package: str) -> dict[str, set[str]]:
    """Edges between the modules of ``package`` (its ``__init__`` left out: it re-exports)."""
    graph: dict[str, set[str]] = {}
    for path in _files(LIBRARY / Path(*package.split(".")[1:])):
        src = _module_name(path)
        if src == package:
            continue
        graph.setdefault(src, set())
        for module, names, _ in _imports(path):
            for target in (module, *(f"{module}.{n}" for n in names)):
                if target.startswith(package + ".") and _is_module(target) and target != src:
                    graph[src].add(target)
    return graph


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_the_modules_of_the_engines_and_the_authoring_package_import_without_cycles(package: str) -> None:
    graph = module_graph(package)
    assert len(graph) > 3
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between modules: " + " -> ".join(cycle or [])


def test_replay_imports_nothing_from_the_consumer() -> None:
    bad = [f"{_module_name(p)}:{line}: {module}" for p in _files(LIBRARY / "replay")
           for module, _, line in _imports(p) if module.startswith("casestream.consumer")]
    assert not bad, "\n".join(bad)
