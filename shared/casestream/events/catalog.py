"""The event catalog: ``schemas/catalog.toml`` + ``.avsc`` files -> composed Avro message schemas.

Pure (stdlib ``json`` / ``tomllib`` only). Layout of the schemas folder::

    schemas/catalog.toml                          subjects, compatibility, owner, topic, versions,
                                                  [catalog] envelope, namespace, upcasters
    schemas/envelope.avsc                         envelope fields shared by every event
    schemas/<aggregate_type>/<EventType>.v<N>.avsc payload record of one version

For each (event type, version) :func:`compose` builds the *message schema* that is
registered under the subject and written on the wire: a record whose full name is the
subject (RecordNameStrategy, e.g. ``casestream.case.CaseOpened``) with the envelope fields
followed by ``payload`` (the payload record inlined). Composed schemas are self-contained
(no references), so generic tools (Confluent ``AvroDeserializer``, ``kcat -s avro``, Kafka
Connect) read every message without casestream code.

``[catalog] upcasters = "package.module:function"`` names the catalog's upcaster chain (a
function returning an :class:`~casestream.events.upcasting.UpcasterChain`, resolved on
:meth:`Catalog.upcaster_chain`); without the key the chain is empty. A service reading other
teams' events loads several folders: ``load_catalog(theirs, ours)`` (:meth:`Catalog.merge`).

Errors: :class:`CatalogError` (a file missing, unreadable or structurally wrong; names the
file), :class:`~casestream.errors.UnknownSchemaError` (event type / version not in the catalog).
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casestream.errors import SchemaError, UnknownSchemaError
from casestream.events.upcasting import UpcasterChain

__all__ = [
    "COMPATIBILITY_LEVELS",
    "Catalog",
    "CatalogError",
    "SchemaVersion",
    "SubjectSpec",
    "compose",
    "load_catalog",
    "normalize",
    "same_schema",
    "schema_text",
]

#: Confluent Schema Registry compatibility levels (docs.confluent.io, "Schema Evolution and
#: Compatibility" -> "Compatibility types").
COMPATIBILITY_LEVELS = frozenset(
    {
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
        "NONE",
    }
)

CATALOG_FILE = "catalog.toml"
_VERSION_FILE = re.compile(r"^(?P<event_type>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")
_REQUIRED_KEYS = ("event_type", "aggregate_type", "topic", "owner", "source", "compatibility", "versions")


class CatalogError(SchemaError):
    """The catalog or a schema file is missing, unreadable or structurally invalid.

    Attributes:
        path: the offending file (relative to the schemas folder when known).
    """

    def __init__(self, message: str, *, path: str | Path | None = None):
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.path = str(path) if path is not None else None
        self.detail = message


@dataclass(frozen=True, slots=True, kw_only=True)
class SubjectSpec:
    """One subject of the catalog (= one event type).

    ``subject`` is the full record name (``casestream.<aggregate_type>.<EventType>``);
    ``versions`` is ``(1, ..., newest)``; ``compatibility`` one of :data:`COMPATIBILITY_LEVELS`.
    """

    subject: str
    event_type: str
    aggregate_type: str
    topic: str
    owner: str
    source: str
    compatibility: str
    versions: tuple[int, ...]
    note: str = ""

    @property
    def newest(self) -> int:
        """The newest version number (what producers write)."""
        return self.versions[-1]

    def path_of(self, version: int) -> str:
        """Payload file of ``version``, relative to the schemas folder (POSIX separators)."""
        return f"{self.aggregate_type}/{self.event_type}.v{version}.avsc"


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaVersion:
    """One (subject, version): the payload schema as written and the composed message schema.

    ``payload`` and ``schema`` are plain JSON-like dicts; treat them as read-only
    (:meth:`Catalog.schema` hands out copies).
    """

    subject: str
    event_type: str
    version: int
    path: str
    text: str
    payload: Mapping[str, Any]
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """The loaded catalog. Build it with :func:`load_catalog`.

    ``subjects`` maps subject -> :class:`SubjectSpec` in file order; ``versions`` maps
    ``(event_type, version)`` -> :class:`SchemaVersion`. ``upcasters`` holds the
    ``"module:function"`` reference of each folder's upcaster chain (``[catalog] upcasters``;
    empty: no upcasters); ``roots`` every folder the catalog was loaded from (``root`` is the
    first; ``namespace`` and envelope are the first folder's: each subject's composed
    schema already holds its own folder's envelope).
    """

    root: Path
    namespace: str
    envelope_path: str
    envelope_text: str
    envelope: Mapping[str, Any]
    subjects: Mapping[str, SubjectSpec]
    versions: Mapping[tuple[str, int], SchemaVersion]
    _by_type: Mapping[str, SubjectSpec] = field(repr=False)
    upcasters: tuple[str, ...] = ()
    roots: tuple[Path, ...] = ()

    def upcaster_chain(self) -> UpcasterChain:
        """A new chain holding the steps of every folder's ``[catalog] upcasters`` function
        (verify it with ``chain.verify(catalog)``; the codec does at ``prepare``).

        Raises:
            ConfigError: a reference does not resolve (names it).
            CatalogError: the function does not return an ``UpcasterChain``.
            UpcasterChainError: two folders register the same step.
        """
        from casestream.refs import resolve  # lazy: only callers of the chain import its module

        chain = UpcasterChain()
        for ref in self.upcasters:
            made = resolve(ref)()
            if not isinstance(made, UpcasterChain):
                raise CatalogError(f"[catalog] upcasters = {ref!r} returned {type(made).__name__}, "
                                   "not an UpcasterChain", path=CATALOG_FILE)
            chain.include(made)
        return chain

    @classmethod
    def merge(cls, *catalogs: Catalog) -> Catalog:
        """One catalog holding the subjects of every ``catalogs`` (in order).

        Raises:
            CatalogError: no catalog given, or an event type or subject appears in two of
                them (the message names both folders).
        """
        if not catalogs:
            raise CatalogError("no catalog to merge")
        if len(catalogs) == 1:
            return catalogs[0]
        subjects: dict[str, SubjectSpec] = {}
        by_type: dict[str, SubjectSpec] = {}
        versions: dict[tuple[str, int], SchemaVersion] = {}
        where_subject: dict[str, Path] = {}
        where_type: dict[str, Path] = {}
        for cat in catalogs:
            for subject, spec in cat.subjects.items():
                if subject in where_subject:
                    raise CatalogError(f"subject {subject} is declared in {where_subject[subject]} "
                                       f"and in {cat.root}")
                if spec.event_type in where_type:
                    raise CatalogError(f"event type {spec.event_type} is declared in "
                                       f"{where_type[spec.event_type]} and in {cat.root}")
                where_subject[subject] = where_type[spec.event_type] = cat.root
                subjects[subject] = by_type[spec.event_type] = spec
            versions.update(cat.versions)
        first = catalogs[0]
        return cls(root=first.root, namespace=first.namespace, envelope_path=first.envelope_path,
                   envelope_text=first.envelope_text, envelope=first.envelope, subjects=subjects,
                   versions=versions, _by_type=by_type,
                   upcasters=tuple(r for c in catalogs for r in c.upcasters),
                   roots=tuple(r for c in catalogs for r in (c.roots or (c.root,))))

    @property
    def event_types(self) -> tuple[str, ...]:
        """All event types, in catalog order."""
        return tuple(self._by_type)

    def subject_for(self, event_type: str) -> SubjectSpec:
        """The subject of ``event_type``. Raises UnknownSchemaError if not in the catalog."""
        try:
            return self._by_type[event_type]
        except KeyError:
            raise UnknownSchemaError(f"event type {event_type!r} is not in the catalog") from None

    def newest_version(self, event_type: str) -> int:
        """Newest version of ``event_type``. Raises UnknownSchemaError."""
        return self.subject_for(event_type).newest

    def newest_versions(self) -> dict[str, int]:
        """``{event_type: newest version}`` for every event type (used by upcaster verification)."""
        return {t: s.newest for t, s in self._by_type.items()}

    def version(self, event_type: str, version: int | None = None) -> SchemaVersion:
        """The :class:`SchemaVersion` of ``event_type`` (newest when ``version`` is None).

        Raises UnknownSchemaError for an unknown event type or version.
        """
        spec = self.subject_for(event_type)
        v = spec.newest if version is None else version
        try:
            return self.versions[(event_type, v)]
        except KeyError:
            raise UnknownSchemaError(
                f"{spec.subject}: version {v} not in the catalog (known: {list(spec.versions)})"
            ) from None

    def schema(self, event_type: str, version: int | None = None) -> dict[str, Any]:
        """A fresh copy of the composed message schema (dict) of ``event_type`` / ``version``."""
        return copy.deepcopy(dict(self.version(event_type, version).schema))

    def topic_for(self, aggregate_type: str) -> str:
        """Kafka topic of ``aggregate_type`` (``outbox.event.<aggregate_type>``).

        Raises UnknownSchemaError if no subject has that aggregate type.
        """
        for spec in self.subjects.values():
            if spec.aggregate_type == aggregate_type:
                return spec.topic
        raise UnknownSchemaError(f"aggregate type {aggregate_type!r} is not in the catalog")

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic of the catalog, sorted."""
        return tuple(sorted({s.topic for s in self.subjects.values()}))

    def iter_versions(self) -> Iterator[SchemaVersion]:
        """Every (subject, version) in catalog order, versions ascending."""
        for spec in self.subjects.values():
            for v in spec.versions:
                yield self.versions[(spec.event_type, v)]


def schema_text(schema: Mapping[str, Any]) -> str:
    """Compact, deterministic JSON text of a schema: what is registered and compared."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


_NAMED_TYPES = frozenset({"record", "error", "enum", "fixed"})
_PRIMITIVE_TYPES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def normalize(schema: Any, namespace: str | None = None) -> Any:
    """``schema`` with every name fully qualified and no ``namespace`` attributes; all else kept.

    Two schemas that differ only in where namespaces are written (registries such as Apicurio
    drop a nested ``namespace`` equal to the enclosing one) normalize to equal dicts. Name
    resolution per the Avro 1.12 specification, "Names". Docs, defaults, aliases and
    custom properties are kept, so this is stricter than the Parsing Canonical Form.
    """
    if isinstance(schema, str):
        if schema in _PRIMITIVE_TYPES or "." in schema or not namespace:
            return schema
        return f"{namespace}.{schema}"
    if isinstance(schema, list):
        return [normalize(b, namespace) for b in schema]
    if not isinstance(schema, Mapping):
        return schema
    t = schema.get("type")
    out = {k: v for k, v in schema.items() if k != "namespace"}
    if t in _NAMED_TYPES and isinstance(schema.get("name"), str):
        name = schema["name"]
        ns = schema.get("namespace") if "." not in name else name.rpartition(".")[0]
        if ns is None:
            ns = namespace
        full = name if "." in name or not ns else f"{ns}.{name}"
        out["name"] = full
        inner = full.rpartition(".")[0] or None
        if "fields" in schema:
            out["fields"] = [
                {**f, "type": normalize(f.get("type"), inner)} if isinstance(f, Mapping) else f
                for f in schema["fields"]
            ]
        return out
    if t == "array":
        out["items"] = normalize(schema.get("items"), namespace)
    elif t == "map":
        out["values"] = normalize(schema.get("values"), namespace)
    elif isinstance(t, (list, Mapping)) or (isinstance(t, str) and t not in _PRIMITIVE_TYPES):
        out["type"] = normalize(t, namespace)
    return out


def same_schema(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether ``a`` and ``b`` are the same schema up to namespace placement (see :func:`normalize`)."""
    return normalize(a) == normalize(b)


def compose(envelope: Mapping[str, Any], subject: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Compose the message schema of ``subject``: envelope fields + ``payload`` (inlined).

    Args:
        envelope: the parsed ``envelope.avsc`` (a record; its name is not used).
        subject: full record name of the message, e.g. ``casestream.case.CaseOpened``.
        payload: the parsed payload record of one version.

    Returns:
        A new self-contained record schema dict named ``subject``.
    """
    namespace, _, name = subject.rpartition(".")
    doc = payload.get("doc") or f"{name} event"
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "doc": doc,
        "fields": [*copy.deepcopy(list(envelope["fields"])), {"name": "payload", "type": copy.deepcopy(dict(payload))}],
    }


ReadText = Callable[[str], str | None]


def _file_reader(root: Path) -> ReadText:
    def read(rel: str) -> str | None:
        p = root / rel
        try:
            return p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CatalogError(f"cannot read: {e.strerror or e}", path=rel) from e
        except UnicodeDecodeError as e:
            raise CatalogError(f"not UTF-8: {e}", path=rel) from e

    return read


def _parse_json(text: str, rel: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CatalogError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", path=rel) from e
    if not isinstance(data, dict) or data.get("type") != "record" or not isinstance(data.get("fields"), list):
        raise CatalogError("not an Avro record schema (need type=record and a fields list)", path=rel)
    for i, f in enumerate(data["fields"]):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
            raise CatalogError(f"field #{i} needs a name and a type", path=rel)
    return data


def _subject_spec(subject: str, raw: Any, namespace: str) -> SubjectSpec:
    where = f"{CATALOG_FILE} [subjects.\"{subject}\"]"
    if not isinstance(raw, dict):
        raise CatalogError("must be a table", path=where)
    missing = [k for k in _REQUIRED_KEYS if k not in raw]
    if missing:
        raise CatalogError(f"missing key(s): {', '.join(missing)}", path=where)
    unknown = sorted(set(raw) - set(_REQUIRED_KEYS) - {"note"})
    if unknown:
        raise CatalogError(f"unknown key(s): {', '.join(unknown)}", path=where)
    for k in _REQUIRED_KEYS[:-1]:
        if not isinstance(raw[k], str) or not raw[k]:
            raise CatalogError(f"{k} must be a non-empty string", path=where)
    level = raw["compatibility"].upper()
    if level not in COMPATIBILITY_LEVELS:
        raise CatalogError(
            f"compatibility {raw['compatibility']!r} is not one of {', '.join(sorted(COMPATIBILITY_LEVELS))}",
            path=where,
        )
    versions = raw["versions"]
    if (
        not isinstance(versions, list)
        or not versions
        or any(not isinstance(v, int) or isinstance(v, bool) for v in versions)
        or versions != list(range(1, len(versions) + 1))
    ):
        raise CatalogError(f"versions must be [1, 2, ..., N] with no gap, got {versions!r}", path=where)
    expected = f"{namespace}.{raw['aggregate_type']}.{raw['event_type']}"
    if subject != expected:
        raise CatalogError(f"subject must be {expected!r} ({namespace}.<aggregate_type>.<event_type>)", path=where)
    return SubjectSpec(
        subject=subject,
        event_type=raw["event_type"],
        aggregate_type=raw["aggregate_type"],
        topic=raw["topic"],
        owner=raw["owner"],
        source=raw["source"],
        compatibility=level,
        versions=tuple(versions),
        note=str(raw.get("note", "")),
    )


def load_catalog(
    *schemas_dirs: str | Path,
    read_text: ReadText | None = None,
    listing: list[str] | None = None,
) -> Catalog:
    """Load and compose the catalog of one schemas folder, or of several merged
    (:meth:`Catalog.merge`: other teams' events and the service's own).

    Args:
        schemas_dirs: the schemas folder(s), each holding a ``catalog.toml``.
        read_text: ``relative path -> text or None if absent``; default reads files under
            the (single) folder (the compatibility check passes a git-ref reader).
        listing: every ``.avsc`` path (relative) present; default lists the folder.
            A version file not named by the catalog is an error (unknown subject/version).

    Returns:
        :class:`Catalog`.

    Raises:
        CatalogError: no folder given; catalog.toml or a schema file missing, malformed, or
            inconsistent (message names the file); an event type or subject in two folders.
    """
    if not schemas_dirs:
        raise CatalogError("no schemas folder given (load_catalog(folder, ...))")
    if len(schemas_dirs) > 1:
        if read_text is not None or listing is not None:
            raise CatalogError("read_text / listing apply to one schemas folder")
        return Catalog.merge(*(load_catalog(d) for d in schemas_dirs))
    root = Path(schemas_dirs[0])
    if read_text is None:
        if not root.is_dir():
            raise CatalogError("schemas folder not found", path=root)
        read_text = _file_reader(root)
        if listing is None:
            listing = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.avsc"))
    text = read_text(CATALOG_FILE)
    if text is None:
        raise CatalogError("catalog file not found", path=root / CATALOG_FILE)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(f"malformed TOML: {e}", path=CATALOG_FILE) from e

    settings = doc.get("catalog", {})
    envelope_rel = settings.get("envelope", "envelope.avsc")
    namespace = settings.get("namespace", "casestream")
    upcasters = settings.get("upcasters", "")
    if not isinstance(upcasters, str) or (upcasters and upcasters.count(":") != 1):
        raise CatalogError(f"[catalog] upcasters {upcasters!r} is not a 'module:function' reference",
                           path=CATALOG_FILE)
    if not isinstance(namespace, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", namespace):
        raise CatalogError(f"[catalog] namespace {namespace!r} is not an Avro namespace", path=CATALOG_FILE)
    envelope_text = read_text(envelope_rel)
    if envelope_text is None:
        raise CatalogError("envelope schema not found", path=envelope_rel)
    envelope = _parse_json(envelope_text, envelope_rel)
    if any(f["name"] == "payload" for f in envelope["fields"]):
        raise CatalogError("the envelope must not declare `payload`; the catalog adds it", path=envelope_rel)

    raw_subjects = doc.get("subjects")
    if not isinstance(raw_subjects, dict) or not raw_subjects:
        raise CatalogError("no [subjects.\"...\"] tables", path=CATALOG_FILE)

    subjects: dict[str, SubjectSpec] = {}
    by_type: dict[str, SubjectSpec] = {}
    topics: dict[str, str] = {}
    versions: dict[tuple[str, int], SchemaVersion] = {}
    for subject, raw in raw_subjects.items():
        spec = _subject_spec(subject, raw, namespace)
        if spec.event_type in by_type:
            raise CatalogError(f"event type {spec.event_type} appears twice", path=CATALOG_FILE)
        if topics.setdefault(spec.aggregate_type, spec.topic) != spec.topic:
            raise CatalogError(
                f"aggregate type {spec.aggregate_type!r} mapped to two topics "
                f"({topics[spec.aggregate_type]!r}, {spec.topic!r})",
                path=CATALOG_FILE,
            )
        subjects[subject] = by_type[spec.event_type] = spec
        for v in spec.versions:
            rel = spec.path_of(v)
            ptext = read_text(rel)
            if ptext is None:
                raise CatalogError(f"schema file of {subject} v{v} not found", path=rel)
            payload = _parse_json(ptext, rel)
            versions[(spec.event_type, v)] = SchemaVersion(
                subject=subject,
                event_type=spec.event_type,
                version=v,
                path=rel,
                text=ptext,
                payload=payload,
                schema=compose(envelope, subject, payload),
            )

    if listing is not None:
        known = {sv.path for sv in versions.values()} | {envelope_rel}
        for rel in listing:
            if rel in known:
                continue
            m = _VERSION_FILE.match(rel.rpartition("/")[2])
            what = (
                f"unknown subject or version: {m['event_type']} v{m['version']} is not in {CATALOG_FILE}"
                if m
                else f"not a catalog file (expected <aggregate_type>/<EventType>.v<N>.avsc named in {CATALOG_FILE})"
            )
            raise CatalogError(what, path=rel)

    return Catalog(
        root=root,
        namespace=namespace,
        envelope_path=envelope_rel,
        envelope_text=envelope_text,
        envelope=envelope,
        subjects=subjects,
        versions=versions,
        _by_type=by_type,
        upcasters=(upcasters,) if upcasters else (),
        roots=(root,),
    )
