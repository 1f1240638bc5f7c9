"""The repository configuration of the schema gate: which subjects exist, from which files.

Pure (stdlib ``tomllib``). A repository describes its subjects in ``casestream-schemas.toml``
at its root, or in the ``[tool.casestream.schemas]`` table of its ``pyproject.toml`` (same
keys)::

    compatibility = "BACKWARD"             # default level of every subject (Confluent's names)
    naming_strategy = "RecordNameStrategy" # default subject naming strategy of folders
    references = ["avro/common/*.avsc"]    # named types any schema may reference (schema references)
    ignore = ["logical-type-changed"]      # waived rules: "RULE" or "RULE:SUBJECT"
    upcasters = "acme.events:upcasters"    # optional: the repository's upcaster chain
    python_path = ["src"]                  # folders the upcaster module is imported from (default ["."])

    [[folders]]                            # a folder and a naming convention
    path = "avro"
    pattern = "{name}.v{version}.avsc"     # {name} groups a subject's files (optional under
                                           # TopicNameStrategy: the folder is one subject), {version} orders them
    topic = "orders"                       # needed by TopicNameStrategy / TopicRecordNameStrategy
    key = false                            # TopicNameStrategy: <topic>-key instead of <topic>-value
    naming_strategy = "TopicRecordNameStrategy"
    compatibility = "FULL"

    [subjects."orders-value"]              # explicit: subject -> files in version order
    files = ["avro/orders/v1.avsc", "avro/orders/v2.avsc"]
    compatibility = "FULL_TRANSITIVE"
    ignore = ["enum-symbol-added-without-default"]
    references = ["avro/common/Money.avsc"]

    [subjects."com.acme.orders.OrderPlaced"]   # no files: settings for a subject a folder finds
    compatibility = "FORWARD"

    [[catalogs]]                           # casestream's own layout (catalog.toml + envelope + payloads)
    path = "schemas"

Naming strategies are those of Confluent's serializers (``subject.name.strategy``):
``TopicNameStrategy`` -> ``<topic>-value`` (``-key``), ``RecordNameStrategy`` -> the record's
full name, ``TopicRecordNameStrategy`` -> ``<topic>-<record full name>``.

``python_path`` folders are appended to ``sys.path`` while the gate imports ``upcasters`` (an
installed package of the same name wins). Every path is relative to the folder holding the
configuration file. Errors:
:class:`~casestream.schemacheck.model.CheckInputError` naming the file and the key (exit 2).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casestream.schemacheck.compat import LEVELS
from casestream.schemacheck.model import CheckInputError

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_PATTERNS",
    "NAMING_STRATEGIES",
    "FolderSpec",
    "GateConfig",
    "SubjectOverride",
    "catalog_config",
    "config_from_text",
    "folder_config",
    "load_config",
    "parse_config",
    "parse_waiver",
]

CONFIG_FILE = "casestream-schemas.toml"
PYPROJECT_TABLE = ("tool", "casestream", "schemas")
NAMING_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
#: Folder patterns tried in order when a folder names none: versioned files, then one-version files.
DEFAULT_PATTERNS = ("{name}.v{version}.avsc", "{name}.avsc")

_TOP_KEYS = {"compatibility", "naming_strategy", "references", "ignore", "upcasters", "python_path", "folders",
             "subjects", "catalogs"}
_FOLDER_KEYS = {"path", "pattern", "topic", "key", "naming_strategy", "compatibility", "ignore", "references"}
_SUBJECT_KEYS = {"files", "compatibility", "ignore", "references"}


@dataclass(frozen=True, slots=True, kw_only=True)
class FolderSpec:
    """``[[folders]]``: every file under ``path`` matching one of ``patterns`` (relative to it)."""

    path: str
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    topic: str = ""
    key: bool = False
    naming_strategy: str = ""
    compatibility: str = ""
    ignore: tuple[str, ...] = ()
    references: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SubjectOverride:
    """``[subjects."NAME"]``: explicit ``files`` (version order) and/or per-subject settings."""

    files: tuple[str, ...] = ()
    compatibility: str = ""
    ignore: tuple[str, ...] = ()
    references: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """A parsed configuration. ``origin`` is how findings name the configuration file."""

    origin: str
    base: str = ""
    file: str = ""  # the configuration file's name in its folder ("" = built in code: catalog_config)
    compatibility: str = "BACKWARD"
    naming_strategy: str = "RecordNameStrategy"
    references: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    upcasters: str = ""
    python_path: tuple[str, ...] = (".",)
    folders: tuple[FolderSpec, ...] = ()
    subjects: Mapping[str, SubjectOverride] = field(default_factory=dict)
    catalogs: tuple[str, ...] = ()

    def rel(self, path: str) -> str:
        """``path`` (relative to the configuration's folder) as findings name it."""
        if not self.base or self.base == ".":
            return path
        return f"{self.base.rstrip('/')}/{path}" if path not in ("", ".") else self.base

    def unrel(self, display: str) -> str:
        """The inverse of :meth:`rel`: a display path back to a path relative to the configuration's folder."""
        prefix = self.base.rstrip("/") + "/" if self.base and self.base != "." else ""
        return display[len(prefix):] if prefix and display.startswith(prefix) else display


def parse_waiver(text: str) -> tuple[str, str]:
    """``"RULE"`` -> ``(RULE, "")``; ``"RULE:SUBJECT"`` -> ``(RULE, SUBJECT)`` (subject may hold ``:``)."""
    rule, _, subject = text.partition(":")
    return rule.strip(), subject.strip()


def _level(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.upper() not in LEVELS:
        raise CheckInputError(f"compatibility {value!r} is not one of {', '.join(LEVELS)}", target=where)
    return value.upper()


def _strategy(value: Any, where: str) -> str:
    if value not in NAMING_STRATEGIES:
        raise CheckInputError(f"naming_strategy {value!r} is not one of {', '.join(NAMING_STRATEGIES)}",
                              target=where)
    return str(value)


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CheckInputError(f"{key} must be a list of non-empty strings, got {value!r}", target=where)
    return tuple(value)


def _waivers(value: Any, where: str) -> tuple[str, ...]:
    from casestream.schemacheck.rules import RULES

    out = _strings(value, "ignore", where)
    for w in out:
        rule, _ = parse_waiver(w)
        if rule not in RULES:
            raise CheckInputError(f"ignore: unknown rule {rule!r} (casestream schemas rules lists them)",
                                  target=where)
    return out


def _unknown(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(raw) - allowed)
    if extra:
        raise CheckInputError(f"unknown key(s) {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}",
                              target=where)


def _folder(raw: Any, where: str, default_strategy: str) -> FolderSpec:
    if not isinstance(raw, Mapping):
        raise CheckInputError("must be a table", target=where)
    _unknown(raw, _FOLDER_KEYS, where)
    path = raw.get("path")
    if not isinstance(path, str) or not path:
        raise CheckInputError("path must be a non-empty string", target=where)
    patterns = _strings(raw.get("pattern", list(DEFAULT_PATTERNS)), "pattern", where)
    strategy = _strategy(raw["naming_strategy"], where) if "naming_strategy" in raw else ""
    for p in patterns:
        # TopicNameStrategy names the subject by the topic alone (<topic>-value): the folder is
        # one subject, its files need no {name}
        if "{name}" not in p and (strategy or default_strategy) != "TopicNameStrategy":
            raise CheckInputError(f"pattern {p!r} needs {{name}} (and {{version}} for several versions), "
                                  f"unless naming_strategy = \"TopicNameStrategy\" (one subject per folder)",
                                  target=where)
    topic = raw.get("topic", "")
    if not isinstance(topic, str):
        raise CheckInputError("topic must be a string", target=where)
    key = raw.get("key", False)
    if not isinstance(key, bool):
        raise CheckInputError("key must be true or false", target=where)
    return FolderSpec(
        path=path.rstrip("/") or ".", patterns=patterns, topic=topic, key=key, naming_strategy=strategy,
        compatibility=_level(raw["compatibility"], where) if "compatibility" in raw else "",
        ignore=_waivers(raw.get("ignore", []), where), references=_strings(raw.get("references", []),
                                                                             "references", where))


def _subject(name: str, raw: Any, where: str) -> SubjectOverride:
    if not isinstance(raw, Mapping):
        raise CheckInputError("must be a table", target=where)
    _unknown(raw, _SUBJECT_KEYS, where)
    return SubjectOverride(
        files=_strings(raw.get("files", []), "files", where),
        compatibility=_level(raw["compatibility"], where) if "compatibility" in raw else "",
        ignore=_waivers(raw.get("ignore", []), where),
        references=_strings(raw.get("references", []), "references", where),
    )


def parse_config(doc: Mapping[str, Any], *, origin: str, base: str = "") -> GateConfig:
    """A :class:`GateConfig` from the parsed TOML table ``doc`` (``origin`` names it in errors).

    Raises:
        CheckInputError: unknown key, bad level or strategy, a folder without ``path``, nothing
            to check (no folders, subjects with files, or catalogs).
    """
    _unknown(doc, _TOP_KEYS, origin)
    strategy = _strategy(doc.get("naming_strategy", "RecordNameStrategy"), origin)
    upcasters = doc.get("upcasters", "")
    if not isinstance(upcasters, str) or (upcasters and upcasters.count(":") != 1):
        raise CheckInputError(f"upcasters {upcasters!r} is not a 'module:function' reference", target=origin)
    folders_raw = doc.get("folders", [])
    if not isinstance(folders_raw, list):
        raise CheckInputError("folders must be an array of tables ([[folders]])", target=origin)
    subjects_raw = doc.get("subjects", {})
    if not isinstance(subjects_raw, Mapping):
        raise CheckInputError('subjects must be a table ([subjects."NAME"])', target=origin)
    catalogs_raw = doc.get("catalogs", [])
    if not isinstance(catalogs_raw, list):
        raise CheckInputError("catalogs must be an array of tables ([[catalogs]])", target=origin)
    catalogs = []
    for i, c in enumerate(catalogs_raw):
        where = f"{origin} [[catalogs]] #{i + 1}"
        if not isinstance(c, Mapping) or not isinstance(c.get("path"), str) or not c["path"]:
            raise CheckInputError("needs path = \"<folder holding catalog.toml>\"", target=where)
        _unknown(c, {"path"}, where)
        catalogs.append(c["path"].rstrip("/") or ".")
    config = GateConfig(
        origin=origin,
        base=base,
        compatibility=_level(doc.get("compatibility", "BACKWARD"), origin),
        naming_strategy=strategy,
        references=_strings(doc.get("references", []), "references", origin),
        ignore=_waivers(doc.get("ignore", []), origin),
        upcasters=upcasters,
        python_path=_strings(doc.get("python_path", ["."]), "python_path", origin),
        folders=tuple(_folder(f, f"{origin} [[folders]] #{i + 1}", strategy) for i, f in enumerate(folders_raw)),
        subjects={name: _subject(name, raw, f'{origin} [subjects."{name}"]') for name, raw in subjects_raw.items()},
        catalogs=tuple(catalogs),
    )
    if not (config.folders or config.catalogs or any(s.files for s in config.subjects.values())):
        raise CheckInputError("nothing to check: declare [[folders]], [subjects.\"NAME\"] files, or [[catalogs]]",
                              target=origin)
    return config


def load_config(path: str | Path) -> GateConfig:
    """Read ``casestream-schemas.toml`` or the ``[tool.casestream.schemas]`` table of a ``pyproject.toml``.

    Paths in it are relative to its folder, named in findings as ``<folder>/<path>``.

    Raises:
        CheckInputError: missing file, malformed TOML, no such table, or a bad key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise CheckInputError("configuration file not found", target=str(path)) from e
    except IsADirectoryError as e:
        raise CheckInputError(f"is a folder, not a {CONFIG_FILE} or pyproject.toml (a folder of schemas: --schemas-dir)",
                              target=str(path)) from e
    except (OSError, UnicodeDecodeError) as e:
        raise CheckInputError(f"cannot read: {e}", target=str(path)) from e
    parent = str(p.parent) if str(p.parent) != "." else ""
    return config_from_text(text, name=p.name, origin=str(path), base=parent)


def config_from_text(text: str, *, name: str, origin: str, base: str = "") -> GateConfig:
    """:func:`load_config` of a file's text (``name``: ``pyproject.toml`` or another file name)."""
    try:
        doc: Any = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CheckInputError(f"malformed TOML: {e}", target=origin) from e
    if name == "pyproject.toml":
        for key in PYPROJECT_TABLE:
            doc = doc.get(key) if isinstance(doc, Mapping) else None
        if not isinstance(doc, Mapping):
            raise CheckInputError("no [tool.casestream.schemas] table", target=origin)
        origin = f"{origin} [tool.casestream.schemas]"
    config = parse_config(doc, origin=origin, base=base)
    return dataclasses.replace(config, file=name)


def catalog_config(folder: str) -> GateConfig:
    """The configuration of casestream's own layout: one ``catalog.toml`` folder."""
    return GateConfig(origin=f"{folder.rstrip('/')}/catalog.toml", catalogs=(folder.rstrip("/") or ".",))


def folder_config(folder: str, *, compatibility: str = "BACKWARD") -> GateConfig:
    """The configuration of a bare folder of ``.avsc`` files (``--schemas-dir`` without a catalog):
    :data:`DEFAULT_PATTERNS`, RecordNameStrategy, level ``compatibility``."""
    return GateConfig(origin=folder, compatibility=compatibility,
                      folders=(FolderSpec(path=folder.rstrip("/") or "."),))
