"""Run the schema gate over a repository: parse, lint, compatibility per level, history, registry.

Entry points: :func:`check_repository` (a :class:`~casestream.schemacheck.config.GateConfig`
or a configuration file), :func:`check_layout` (subjects already built) and
:func:`check_catalog` (casestream's ``catalog.toml`` layout: one configuration of the same
gate). Order per subject: single-schema rules on every file (:mod:`.lint`), then both
parsers (fastavro and Apache avro, named types of ``references`` first) on every schema,
then every version > 1 against earlier versions under the subject's level (:mod:`.compat`),
then the upcaster rules where the repository declares its upcaster chain (an event step
that renames or splits a type continues its history in the produced types). Optional:
``against`` (git ref, :mod:`.history`) and ``registry`` (:mod:`.remote`). Waived rules
(``ignore``: ``RULE`` or ``RULE:SUBJECT``) are dropped last.

Raises :class:`~casestream.schemacheck.model.CheckInputError` for bad input (exit 2); returns
a :class:`~casestream.schemacheck.model.Report` otherwise (exit 0 or 1).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casestream.schemacheck.compat import check_history, parse_avro, parse_fastavro
from casestream.schemacheck.config import GateConfig, catalog_config, load_config, parse_waiver
from casestream.schemacheck.layout import Layout, Subject, Tree, WorkTree, build_layout
from casestream.schemacheck.lint import lint_schema
from casestream.schemacheck.model import CheckInputError, Finding, Report, finding_for

__all__ = ["check_catalog", "check_layout", "check_repository", "load_for_check", "load_layout", "rename_findings",
           "upcaster_findings"]


def upcaster_findings(subject: Subject) -> list[Finding]:
    """One ``upcaster-missing`` error per version N > 1 of ``subject`` that its declared upcaster
    chain (``subject.upcasters``, a ``module:function`` returning an
    :class:`~casestream.events.upcasting.UpcasterChain`) cannot reach from N-1. No chain
    declared: no findings (the rule applies only where a repository declares one).

    Raises:
        CheckInputError: the reference does not resolve or returns something else (exit 2).
    """
    if not subject.upcasters:
        return []
    steps = _chain_steps(subject.upcasters, subject.declared_in.partition(" [")[0])
    out = []
    for prev, v in zip(subject.versions, subject.versions[1:]):
        if (subject.event_type, prev.number) not in steps:
            out.append(finding_for(
                "upcaster-missing", subject=subject.name, versions=f"{prev.label}->{v.label}", path="",
                message=f"no upcaster {subject.event_type} {prev.label}->{v.label} in {subject.upcasters}: "
                        f"a {prev.label} event cannot be read as {v.label}",
                file=v.file))
    return out


@dataclass(frozen=True, slots=True)
class _Chain:
    """What the gate reads of a declared chain: payload steps ``(type, v) -> (type, v + 1)`` and
    event steps ``(type, v) -> declared produces`` (the ``produces`` given to ``add_event``)."""

    payload: frozenset[tuple[str, int]]
    events: Mapping[tuple[str, int], frozenset[tuple[str, int]]]

    def ends(self, start: tuple[str, int]) -> set[tuple[str, int]]:
        """Every ``(type, version)`` the chain can lift ``start`` to (the versions with no further step)."""
        out: set[tuple[str, int]] = set()
        seen: set[tuple[str, int]] = set()
        todo = [start]
        while todo:
            node = todo.pop()
            if node in seen:  # a loop: UpcasterChain.verify reports it at start-up
                continue
            seen.add(node)
            if node in self.payload:
                todo.append((node[0], node[1] + 1))
            elif node in self.events:
                todo.extend(self.events[node])
            else:
                out.add(node)
        return out


_CHAINS: dict[tuple[str, tuple[str, ...]], _Chain] = {}
#: folders the running check appended to sys.path (the repository's python_path, --python-path)
_SEARCHED: ContextVar[tuple[str, ...]] = ContextVar("_SEARCHED", default=())


@contextmanager
def _import_path(folders: Sequence[str]) -> Iterator[None]:
    """``folders`` appended to ``sys.path`` for the duration (after the installed packages, so a
    folder of the repository cannot shadow a library; an installed copy of the team's package wins)."""
    added = [f for f in folders if f not in sys.path]
    sys.path.extend(added)
    importlib.invalidate_caches()
    token = _SEARCHED.set(tuple(folders))
    try:
        yield
    finally:
        _SEARCHED.reset(token)
        for f in added:
            if f in sys.path:
                sys.path.remove(f)


def _import_error(ref: str, error: Exception) -> str:
    """One line for a chain reference that does not import: which module, why, and the fix."""
    cause = error.__cause__
    module = ref.partition(":")[0]
    if not isinstance(cause, ModuleNotFoundError) or not cause.name:
        return f"upcasters = {ref!r}: {error}"
    missing = cause.name
    if module == missing or module.startswith(missing + "."):
        searched = ", ".join(_SEARCHED.get()) or "none"
        return (f"upcasters = {ref!r}: module {module} is not importable (no module named {missing!r} among the "
                f"installed packages or the python_path folders: {searched}): install the repository's package "
                f"(pip install -e .; the GitHub Action's input install) or name the folder holding it with "
                f"python_path = [\"src\"] in the configuration or --python-path DIR")
    return (f"upcasters = {ref!r}: module {module} imports {missing}, which is not installed: install the "
            f"repository's package with its dependencies (pip install -e .; the GitHub Action's input install; "
            f"pre-commit: additional_dependencies)")


def _chain_steps(ref: str, where: str) -> set[tuple[str, int]]:
    chain = _chain(ref, where)
    return {*chain.payload, *chain.events}


def _chain(ref: str, where: str) -> _Chain:
    key = (ref, _SEARCHED.get())
    if key not in _CHAINS:
        from casestream.errors import ConfigError
        from casestream.events.upcasting import UpcasterChain
        from casestream.refs import resolve

        try:
            made = resolve(ref)()
        except ConfigError as e:
            raise CheckInputError(_import_error(ref, e), target=where) from e
        if not isinstance(made, UpcasterChain):
            raise CheckInputError(f"upcasters = {ref!r} returned {type(made).__name__}, not an UpcasterChain",
                                  target=where)
        events = made.event_steps()
        _CHAINS[key] = _Chain(payload=frozenset(made.steps()) - set(events), events=events)
    return _CHAINS[key]


def rename_findings(subject: Subject, layout: Layout) -> list[Finding]:
    """Findings on the event steps of ``subject``'s declared chain that take its event type A
    (``UpcasterChain.add_event(A, n, fn, produces=[(B, m), ...])``: a rename, a split, a drop).

    B's history continues A's: a ``(B, m)`` the step produces is a version of B as a consumer
    reads it, so B's first version needs no upcaster from A's (the ``upcaster-missing`` rule
    stays within one event type). Two ways it breaks, each one error:

    * ``upcaster-target-missing``: a declared ``(B, m)`` no subject of ``layout`` with the
      same chain holds (no event type B, or B has fewer than m versions);
    * ``upcaster-rename-incomplete``: the step does not produce A itself (A's history ends at
      n), yet A has a version newer than n that the chain lifts into none of the produced
      types (events written as that version are never read as B).

    No chain declared: no findings.

    Raises:
        CheckInputError: the chain reference does not resolve (see :func:`upcaster_findings`).
    """
    if not subject.upcasters:
        return []
    chain = _chain(subject.upcasters, subject.declared_in.partition(" [")[0])
    held: dict[str, int] = {}  # event type -> newest version in this repository (same chain)
    for other in layout.subjects.values():
        if other.upcasters == subject.upcasters and other.versions:
            held[other.event_type] = max(held.get(other.event_type, 0), other.versions[-1].number)
    a = subject.event_type
    by_number = {v.number: v for v in subject.versions}
    out = []
    for (event_type, n), produces in sorted(chain.events.items()):
        if event_type != a:
            continue
        file = (by_number.get(n) or subject.versions[-1]).file
        for b, m in sorted(produces):
            if m > held.get(b, 0):
                has = f"{b} has v1..v{held[b]}" if b in held else f"no subject has event type {b}"
                out.append(finding_for(
                    "upcaster-target-missing", subject=subject.name, versions=f"v{n}->{b} v{m}", path="",
                    message=f"the event upcaster of {a} v{n} in {subject.upcasters} produces {b} v{m}, "
                            f"which this repository does not have ({has})", file=file))
        targets = {b for b, _ in produces}
        if a in targets or not targets:
            continue
        names = ", ".join(sorted(targets))
        for v in subject.versions:
            if v.number > n and not {b for b, _ in chain.ends((a, v.number))} & targets:
                out.append(finding_for(
                    "upcaster-rename-incomplete", subject=subject.name, versions=f"{v.label}->{names}", path="",
                    message=f"{a} v{n} is renamed to {names} by an event upcaster in {subject.upcasters}, "
                            f"but no step lifts the newer {a} {v.label} into {names}: "
                            f"{v.label} events are never read as {names}", file=v.file))
    return out


def _lint(subject: Subject) -> list[Finding]:
    out: list[Finding] = []
    for v in subject.versions:
        for issue in lint_schema(v.lint, path=v.lint_prefix):
            out.append(finding_for(issue.rule, subject=subject.name, versions=v.label, path=issue.path,
                                   message=issue.message, file=v.file, text=v.text))
        if v.expected_name:
            name = str(v.lint.get("name", ""))
            full = name if "." in name else f"{v.lint.get('namespace', '')}.{name}"
            if full != v.expected_name:
                out.append(finding_for(
                    "payload-name", subject=subject.name, versions=v.label, path=v.lint_prefix,
                    message=f"payload record is {full!r}, expected {v.expected_name!r}", file=v.file, text=v.text))
    return out


def _parse(subject: Subject) -> list[Any]:
    parsed = []
    for v in subject.versions:
        for parser in (parse_fastavro, parse_avro):
            try:
                result = parser(v.schema, references=subject.references)
            except Exception as e:  # noqa: BLE001 - both parsers raise several types
                name = "fastavro" if parser is parse_fastavro else "avro"
                hint = (" (a named type declared in another file: list that file in references = [...])"
                        if type(e).__name__ == "UnknownType" else "")
                raise CheckInputError(f"not a valid Avro schema ({name}: {type(e).__name__}: {e}){hint}",
                                      target=v.file) from e
        parsed.append(result)
    return parsed


def _compat(subject: Subject, parsed: list[Any], report: Report) -> list[Finding]:
    out: list[Finding] = []
    labels = [v.label for v in subject.versions]
    for pair, issues in check_history(parsed, subject.level, labels=labels):
        report.pairs += 1
        new = max(pair.reader, pair.writer)
        old = min(pair.reader, pair.writer)
        v = subject.versions[new]
        report.checked.append(f"{subject.name} {labels[old]}->{labels[new]} {pair.direction}")
        for issue in issues:
            out.append(finding_for(
                issue.rule, subject=subject.name, versions=f"{labels[old]}->{labels[new]}", path=issue.path,
                message=f"{pair.direction}: {issue.message}", mode=subject.level, file=v.file, text=v.text))
    return out


def _waived(f: Finding, layout: Layout, ignore: Sequence[tuple[str, str]]) -> bool:
    subject = layout.subjects.get(f.subject)
    if subject is not None and f.rule in subject.ignore:
        return True
    return any(rule == f.rule and (not only or only == f.subject) for rule, only in ignore)


def _check_subject_names(layout: Layout, waivers: Sequence[tuple[str, str]]) -> None:
    """Settings and waivers that name a subject must name one of the layout's: a misspelt
    subject would silently keep the default level (or the rule) in force.

    Raises:
        CheckInputError: naming the table or waiver and the known subjects.
    """
    config = layout.config
    known = ", ".join(sorted(layout.subjects)) or "none"
    if config is not None:
        for name, spec in config.subjects.items():
            if not spec.files and name not in layout.subjects:
                raise CheckInputError(f'[subjects."{name}"] names no subject found by [[folders]] or [[catalogs]] '
                                      f"(known: {known})", target=config.origin)
        lists = [("ignore", config.ignore), *((f"[[folders]] #{i} ignore", f.ignore)
                                              for i, f in enumerate(config.folders, 1))]
        lists += [(f'[subjects."{n}"] ignore', s.ignore) for n, s in config.subjects.items()]
        for where, entries in lists:
            for entry in entries:
                subject = parse_waiver(entry)[1]
                if subject and subject not in layout.subjects:
                    raise CheckInputError(f"{where}: {entry!r} names no subject of this repository (known: {known})",
                                          target=config.origin)
    for rule, subject in waivers:
        if subject and subject not in layout.subjects:
            raise CheckInputError(f"--ignore {rule}:{subject}: no such subject (known: {known})")


def check_layout(
    layout: Layout,
    *,
    subjects: Iterable[str] | None = None,
    against: str | None = None,
    registry: Any = None,
    ignore: Iterable[str] = (),
    tree: Tree | None = None,
) -> Report:
    """Check the subjects of ``layout`` (or only ``subjects``).

    Args:
        layout: from :func:`load_layout` / :func:`~casestream.schemacheck.layout.build_layout`.
        subjects: restrict to these subject names; unknown -> CheckInputError.
        against: a git ref; versions published there must be unchanged (:mod:`.history`).
        registry: a registry URL, :class:`~casestream.schemacheck.remote.RegistryOptions`, or a
            :class:`~casestream.events.registry.SchemaRegistry`; the files are compared with the
            subjects' registered versions (:mod:`.remote`).
        ignore: waivers ``RULE`` or ``RULE:SUBJECT`` (on top of the configuration's).
        tree: where the layout was read from (needed by ``against``).

    Raises:
        CheckInputError: unknown subject or rule (also in a waiver or a ``[subjects."NAME"]``
            table without files), bad git ref, registry down or refusing.
    """
    from casestream.schemacheck.rules import RULES

    started = time.perf_counter()
    waivers = [parse_waiver(w) for w in ignore]
    for rule, _ in waivers:
        if rule not in RULES:
            raise CheckInputError(f"--ignore: unknown rule {rule!r}; known: {', '.join(RULES)}")
    _check_subject_names(layout, waivers)
    wanted = list(layout.subjects)
    if subjects:
        unknown = [s for s in subjects if s not in layout.subjects]
        if unknown:
            origin = layout.config.origin if layout.config else ""
            raise CheckInputError(f"unknown subject(s) {', '.join(unknown)}; known: {', '.join(layout.subjects)}",
                                  target=origin or None)
        wanted = [s for s in layout.subjects if s in set(subjects)]
    report = Report()
    findings: list[Finding] = []
    for file, text, schema in layout.lint_only:
        for issue in lint_schema(schema):
            findings.append(finding_for(issue.rule, subject="", versions="", path=issue.path,
                                        message=issue.message, file=file, text=text))
    for name in wanted:
        subject = layout.subjects[name]
        report.subjects += 1
        report.checked_subjects.append(name)
        report.versions += len(subject.versions)
        lint = [f for f in _lint(subject) if not _waived(f, layout, waivers)]
        findings.extend(lint)
        if not any(f.severity == "error" for f in lint):
            findings.extend(_compat(subject, _parse(subject), report))
        findings.extend(upcaster_findings(subject))
        findings.extend(rename_findings(subject, layout))
    if against:
        from casestream.schemacheck.history import compare_to_ref

        if tree is None or layout.config is None:
            raise CheckInputError("--against needs a layout read from a work tree")
        findings.extend(compare_to_ref(layout, tree, against, subjects=wanted))
    if registry is not None:
        from casestream.schemacheck.remote import compare_to_registry

        findings.extend(compare_to_registry(layout, registry, subjects=wanted, already=findings))
    report.findings = [f for f in findings if not _waived(f, layout, waivers)]
    report.seconds = time.perf_counter() - started
    return report


def load_layout(config: GateConfig | str | Path, root: str | Path = ".") -> tuple[Layout, Tree]:
    """The layout of a configuration (a :class:`GateConfig` with paths relative to ``root``, or a
    configuration file) read from the working tree.

    Raises:
        CheckInputError: see :func:`~casestream.schemacheck.config.load_config` and
            :func:`~casestream.schemacheck.layout.build_layout`.
    """
    if not isinstance(config, GateConfig):
        path = Path(config)
        config = load_config(path)
        root = path.parent
    tree = WorkTree(root)
    return build_layout(config, tree), tree


def check_repository(config: GateConfig | str | Path, *, root: str | Path = ".", python_path: Sequence[str] = (),
                     **options: Any) -> Report:
    """Check a repository described by ``config`` (a file, or a :class:`GateConfig` relative to ``root``).

    The configuration's ``python_path`` folders (relative to its folder; default: that folder)
    and ``python_path`` (relative to the current directory) are on ``sys.path`` while the
    declared upcaster chain is imported. ``options``: as :func:`check_layout` (``subjects``,
    ``against``, ``registry``, ``ignore``).

    Raises:
        CheckInputError: as :func:`check_layout`, and a ``python_path`` folder that does not exist.
    """
    started = time.perf_counter()
    layout, tree = load_layout(config, root)
    folders = []
    base = Path(tree.root) if isinstance(tree, WorkTree) else Path(root)
    for rel in layout.config.python_path if layout.config is not None else ():
        folder = (base / rel).resolve()
        if not folder.is_dir():
            raise CheckInputError(f"python_path: folder {rel!r} not found ({folder})",
                                  target=layout.config.origin if layout.config is not None else None)
        folders.append(str(folder))
    for rel in python_path:
        if not Path(rel).is_dir():
            raise CheckInputError(f"--python-path: folder {rel!r} not found")
        folders.append(str(Path(rel).resolve()))
    with _import_path(folders):
        report = check_layout(layout, tree=tree, **options)
    report.seconds = time.perf_counter() - started
    return report


def load_for_check(schemas_dir: str | Path) -> Any:
    """Load casestream's catalog (:func:`~casestream.events.catalog.load_catalog`); a
    CatalogError becomes a CheckInputError naming the file once (exit 2)."""
    from casestream.events.catalog import CatalogError, load_catalog

    try:
        return load_catalog(schemas_dir)
    except CatalogError as e:
        path = Path(e.path) if e.path else None
        target = str(path) if path is None or path.is_absolute() or path.parts[:len(Path(schemas_dir).parts)] == \
            Path(schemas_dir).parts else str(Path(schemas_dir) / path)
        raise CheckInputError(e.detail, target=target) from e


def check_catalog(
    schemas_dir: str | Path,
    *,
    subjects: Iterable[str] | None = None,
    against: str | None = None,
    registry: Any = None,
    ignore: Iterable[str] = (),
) -> Report:
    """Check casestream's catalog layout in ``schemas_dir`` (``catalog.toml``, envelope, payloads):
    :func:`check_repository` with :func:`~casestream.schemacheck.config.catalog_config`.

    Findings name files as ``<schemas_dir>/<file>``.
    """
    folder = Path(schemas_dir)
    if not (folder / "catalog.toml").is_file():
        if not folder.is_dir():
            raise CheckInputError("schemas folder not found", target=str(schemas_dir))
        raise CheckInputError("catalog file not found", target=str(folder / "catalog.toml"))
    parent, name = folder.parent, folder.name or "."
    config = catalog_config(name)
    config = GateConfig(origin=f"{str(schemas_dir).rstrip('/')}/catalog.toml", base=str(parent) if str(
        parent) != "." else "", catalogs=config.catalogs)
    return check_repository(config, root=parent, subjects=subjects, against=against, registry=registry,
                            ignore=ignore)
