"""From a :class:`~casestream.schemacheck.config.GateConfig` to the subjects the gate checks.

Pure except for reading files through a :class:`Tree` (the working tree, or a git ref for
``--against``). A :class:`Subject` is a name, a compatibility level, waivers and its
:class:`Version` s in order; a version holds the schema *as checked* (the file as written, or
for a casestream catalog the composed message schema that is registered), the JSON the
single-schema rules run on, and the files it was made from (what ``--against`` compares).

Three sources, one model: ``[[folders]]`` (pattern + naming strategy), ``[subjects."NAME"]``
``files`` (version order), ``[[catalogs]]`` (casestream's ``catalog.toml`` layout, loaded by
:func:`casestream.events.catalog.load_catalog`).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casestream.schemacheck.config import NAMING_STRATEGIES, FolderSpec, GateConfig
from casestream.schemacheck.model import CheckInputError

__all__ = ["Layout", "Subject", "Tree", "Version", "WorkTree", "build_layout", "subject_name"]


class Tree:
    """Read access to a repository's files: ``read(rel)`` -> text or None, ``files()`` -> every path.

    Paths are POSIX, relative to the configuration's folder.
    """

    def read(self, rel: str) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def files(self, under: str = "") -> list[str]:  # pragma: no cover - interface
        """Every ``.avsc`` path under the folder ``under`` ("" = everywhere)."""
        raise NotImplementedError


class WorkTree(Tree):
    """Files on disk under ``root``."""

    #: folders never searched: VCS data, virtualenvs, caches, this project's .local state
    SKIP = frozenset({".git", ".venv", "venv", "node_modules", ".local", "__pycache__", ".tox", "build", "dist"})

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._files: dict[str, list[str]] = {}

    def read(self, rel: str) -> str | None:
        try:
            return (self.root / rel).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise CheckInputError(f"cannot read: {e}", target=rel) from e

    def files(self, under: str = "") -> list[str]:
        under = under.strip("/")
        if under not in self._files:
            top = self.root / under if under else self.root
            found = []
            for folder, dirs, names in os.walk(top):
                dirs[:] = [d for d in dirs if d not in self.SKIP]
                rel = Path(folder).relative_to(self.root).as_posix()
                prefix = "" if rel == "." else rel + "/"
                found.extend(prefix + n for n in names if n.endswith(".avsc"))
            self._files[under] = sorted(found)
        return self._files[under]


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    """One version of a subject.

    Attributes:
        number: 1-based position in version order.
        file: the file findings annotate, as the user names it (``avro/Order.v2.avsc``).
        text: that file's text (for line numbers).
        schema: JSON of the schema as checked and registered.
        lint: JSON the single-schema rules run on (the file as written), ``lint_prefix`` their
            field-path prefix (``payload`` for casestream payload files).
        sources: every file the schema was made from, display path -> text (``--against``): its
            own, a catalog's envelope, and the files of the named types it may reference.
        expected_name: full name the top-level record must have (casestream payloads), or "".
    """

    number: int
    file: str
    text: str
    schema: Any
    lint: Any
    lint_prefix: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    expected_name: str = ""

    @property
    def label(self) -> str:
        """``v<number>``."""
        return f"v{self.number}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """A subject and its versions in order.

    Attributes:
        name: the subject (registry name).
        level: compatibility level (:data:`~casestream.schemacheck.compat.LEVELS`).
        versions: oldest first.
        ignore: waived rule ids.
        references: JSON of named types the versions may reference (parsed before them).
        upcasters: ``"module:function"`` of the declared upcaster chain, or "" (no upcaster rule).
        event_type: the name the upcaster chain keys steps by.
        declared_in: where the subject is declared (for unknown-subject errors).
    """

    name: str
    level: str
    versions: tuple[Version, ...]
    ignore: frozenset[str] = frozenset()
    references: tuple[Any, ...] = ()
    upcasters: str = ""
    event_type: str = ""
    declared_in: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Every subject of a repository, plus files only linted (a catalog's envelope)."""

    subjects: Mapping[str, Subject]
    lint_only: tuple[tuple[str, str, Any], ...] = ()  # (display file, text, JSON)
    config: GateConfig | None = None


def subject_name(strategy: str, *, record: str, topic: str, key: bool = False) -> str:
    """Subject of a schema under a Confluent naming strategy (``subject.name.strategy``).

    Raises:
        ValueError: TopicNameStrategy / TopicRecordNameStrategy without a topic, or another strategy.
    """
    if strategy == "RecordNameStrategy":
        return record
    if strategy not in NAMING_STRATEGIES:
        raise ValueError(f"unknown naming strategy {strategy!r}")
    if not topic:
        raise ValueError(f"{strategy} needs a topic")
    if strategy == "TopicNameStrategy":
        return f"{topic}-{'key' if key else 'value'}"
    return f"{topic}-{record}"


def _load_json(text: str, file: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckInputError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", target=file,
                              line=e.lineno) from e


def _full_name(schema: Any) -> str:
    if not isinstance(schema, Mapping) or not isinstance(schema.get("name"), str):
        return ""
    name = schema["name"]
    ns = schema.get("namespace")
    return name if "." in name or not ns else f"{ns}.{name}"


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\{name\}|\{version\})", pattern):
        if part == "{name}":
            out += r"(?P<name>[^/]+?)" if "{name}/" not in pattern else r"(?P<name>[^/]+)"
        elif part == "{version}":
            out += r"(?P<version>[0-9]+)"
        else:
            out += re.escape(part).replace(r"\*", "[^/]*")
    return re.compile(out + r"\Z")


class _Builder:
    def __init__(self, config: GateConfig, tree: Tree):
        self.config = config
        self.tree = tree
        self.subjects: dict[str, Subject] = {}
        self.lint_only: list[tuple[str, str, Any]] = []
        self._refs: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self._ref_sources: dict[tuple[str, ...], dict[str, str]] = {}

    def text(self, rel: str, what: str) -> str:
        text = self.tree.read(rel)
        if text is None:
            raise CheckInputError(f"{what} not found", target=self.config.rel(rel))
        return text

    def references(self, globs: Iterable[str]) -> tuple[Any, ...]:
        """JSON of the named types the files matching ``globs`` declare (each file read once)."""
        key = tuple(globs)
        if key not in self._refs:
            out = []
            sources: dict[str, str] = {}
            for g in key:
                fixed = re.split(r"[*?\[]", g, maxsplit=1)[0].rpartition("/")[0]
                matched = [f for f in self.tree.files(fixed) if fnmatch.fnmatchcase(f, g)] if any(
                    c in g for c in "*?[") else [g]
                if not matched:
                    raise CheckInputError(f"references: {g!r} matches no file", target=self.config.origin)
                for rel in matched:
                    text = self.text(rel, "referenced schema")
                    out.append(_load_json(text, self.config.rel(rel)))
                    sources[self.config.rel(rel)] = text
            self._refs[key] = tuple(out)
            self._ref_sources[key] = sources
        return self._refs[key]

    def reference_sources(self, globs: Iterable[str]) -> dict[str, str]:
        """Display path -> text of the files :meth:`references` read for ``globs``: part of every
        version that may use them (a changed referenced type changes the published schema)."""
        self.references(globs)
        return self._ref_sources[tuple(globs)]

    def waivers(self, name: str, *lists: Iterable[str]) -> frozenset[str]:
        from casestream.schemacheck.config import parse_waiver

        out = set()
        for lst in (self.config.ignore, *lists):
            for w in lst:
                rule, subject = parse_waiver(w)
                if not subject or subject == name:
                    out.add(rule)
        return frozenset(out)

    def add(self, subject: Subject) -> None:
        if subject.name in self.subjects:
            raise CheckInputError(
                f"subject {subject.name} is declared twice ({self.subjects[subject.name].declared_in} and "
                f"{subject.declared_in})", target=self.config.origin)
        self.subjects[subject.name] = subject

    def raw_version(self, number: int, rel: str, refs: Mapping[str, str]) -> Version:
        file = self.config.rel(rel)
        text = self.text(rel, "schema file")
        schema = _load_json(text, file)
        return Version(number=number, file=file, text=text, schema=schema, lint=schema,
                       sources={file: text, **{r: t for r, t in refs.items() if r != file}})

    def explicit(self) -> None:
        for name, spec in self.config.subjects.items():
            if not spec.files:
                continue
            globs = [*self.config.references, *spec.references]
            ref_sources = self.reference_sources(globs)
            versions = tuple(self.raw_version(i + 1, rel, ref_sources) for i, rel in enumerate(spec.files))
            self.add(Subject(
                name=name, level=spec.compatibility or self.config.compatibility, versions=versions,
                ignore=self.waivers(name, spec.ignore),
                references=self.references(globs),
                upcasters=self.config.upcasters, event_type=_full_name(versions[-1].schema).rpartition(".")[2],
                declared_in=f'{self.config.origin} [subjects."{name}"]'))

    def folder(self, spec: FolderSpec, index: int) -> None:
        where = f"{self.config.origin} [[folders]] #{index}"
        prefix = "" if spec.path == "." else spec.path + "/"
        regexes = [_pattern_regex(p) for p in spec.patterns]
        groups: dict[str, list[tuple[int, str]]] = {}
        explicit = {rel for s in self.config.subjects.values() for rel in s.files}
        for rel in self.tree.files(spec.path if spec.path != "." else ""):
            if not rel.startswith(prefix) or rel in explicit:
                continue
            inner = rel[len(prefix):]
            for rx in regexes:
                m = rx.match(inner)
                if m:
                    version = int(m.group("version")) if "version" in rx.groupindex else 1
                    groups.setdefault(m.groupdict().get("name") or "", []).append((version, rel))
                    break
        if not groups:
            raise CheckInputError(f"no file under {self.config.rel(spec.path)!r} matches "
                                  f"{' or '.join(spec.patterns)}", target=where)
        strategy = spec.naming_strategy or self.config.naming_strategy
        globs = [*self.config.references, *spec.references]
        refs = self.references(globs)
        for group, files in sorted(groups.items()):
            files.sort()
            numbers = [v for v, _ in files]
            if len(set(numbers)) != len(numbers):
                dup = sorted({self.config.rel(r) for v, r in files if numbers.count(v) > 1})
                raise CheckInputError(f"two files for one version: {', '.join(dup)}", target=where)
            last = files[-1][1]
            record = _full_name(_load_json(self.text(last, "schema file"), self.config.rel(last)))
            try:
                name = subject_name(strategy, record=record or group, topic=spec.topic, key=spec.key)
            except ValueError as e:
                raise CheckInputError(f"{e} (topic = \"...\")", target=where) from e
            override = self.config.subjects.get(name)
            level = (override.compatibility if override else "") or spec.compatibility or self.config.compatibility
            extra = list(override.references) if override and override.references else []
            extra_refs = self.references(extra) if extra else ()
            ref_sources = {**self.reference_sources(globs), **(self.reference_sources(extra) if extra else {})}
            versions = tuple(self.raw_version(i + 1, rel, ref_sources) for i, (_, rel) in enumerate(files))
            self.add(Subject(
                name=name, level=level, versions=versions,
                ignore=self.waivers(name, spec.ignore, override.ignore if override else ()),
                references=(*refs, *extra_refs), upcasters=self.config.upcasters,
                event_type=(record or group).rpartition(".")[2],
                declared_in=f"{where} ({self.config.rel((prefix + group).rstrip('/') or '.')})"))

    def catalog(self, folder: str) -> None:
        from casestream.events.catalog import CatalogError, load_catalog

        prefix = "" if folder == "." else folder + "/"
        display = self.config.rel(folder)

        def show(rel: str) -> str:
            return f"{display}/{rel}" if display not in ("", ".") else rel

        listing = [f[len(prefix):] for f in self.tree.files(folder if folder != "." else "") if f.startswith(prefix)]
        try:
            cat = load_catalog(folder, read_text=lambda rel: self.tree.read(prefix + rel), listing=listing)
        except CatalogError as e:
            raise CheckInputError(e.detail, target=show(e.path) if e.path else display) from e
        envelope_file = show(cat.envelope_path)
        self.lint_only.append((envelope_file, cat.envelope_text, cat.envelope))
        refs = self.references(self.config.references)
        for spec in cat.subjects.values():
            versions = []
            for v in spec.versions:
                sv = cat.versions[(spec.event_type, v)]
                file = show(sv.path)
                versions.append(Version(
                    number=v, file=file, text=sv.text, schema=sv.schema, lint=sv.payload, lint_prefix="payload",
                    sources={**self.reference_sources(self.config.references), file: sv.text,
                             envelope_file: cat.envelope_text},
                    expected_name=f"{cat.namespace}.{spec.aggregate_type}.{spec.event_type}Payload"))
            override = self.config.subjects.get(spec.subject)
            self.add(Subject(
                name=spec.subject, level=(override.compatibility if override else "") or spec.compatibility,
                versions=tuple(versions), ignore=self.waivers(spec.subject, override.ignore if override else ()),
                references=refs, upcasters=cat.upcasters[0] if cat.upcasters else "", event_type=spec.event_type,
                declared_in=show("catalog.toml")))


def build_layout(config: GateConfig, tree: Tree) -> Layout:
    """Every subject ``config`` declares, read through ``tree``.

    Raises:
        CheckInputError: a file missing or not JSON, a folder matching nothing, a subject declared
            twice, a naming strategy without its topic, a catalog that does not load.
    """
    b = _Builder(config, tree)
    for folder in config.catalogs:
        b.catalog(folder)
    b.explicit()
    for i, spec in enumerate(config.folders, start=1):
        b.folder(spec, i)
    return Layout(subjects=b.subjects, lint_only=tuple(b.lint_only), config=config)
