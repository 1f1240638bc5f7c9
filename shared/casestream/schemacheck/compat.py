"""Reader/writer compatibility of two Avro schemas, and Confluent's compatibility levels over a history.

The verdict on every type pair comes from Apache avro's
``avro.compatibility.ReaderWriterCompatibilityChecker`` (a port of Java's
``SchemaCompatibility``, the checker Confluent's registry uses). This module walks matching
record fields itself so each problem gets a field path, a rule id and a fix, and adds what
that checker lacks:

* ``logical-type-changed`` — same underlying type, other logical type (timestamp-millis ->
  timestamp-micros reads fine and means 1000x something else). Avro spec, "Logical Types".
* ``enum-symbol-added-without-default`` — named explicitly (the checker reports a bare
  ``missing_enum_symbols``); a reader enum ``default`` makes it compatible (Avro spec, "Enums").
* renames: a missing field whose type matches an unmatched writer field is reported as
  ``field-renamed-without-alias`` (reader = new version) or ``field-removed-without-default``
  with a rename note (reader = old version: aliases only help readers of the new version).

Levels (Confluent, "Schema Evolution and Compatibility"): BACKWARD = the new schema reads data
of the previous one; FORWARD = the previous schema reads data of the new one; FULL = both;
``*_TRANSITIVE`` = against every earlier version, not only the latest; NONE = no check.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import avro.name
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from casestream.schemacheck.lint import Issue
from casestream.schemacheck.rules import RULES

#: rule id -> whether it is stricter than Avro's verdict (it does not explain an incompatible pair)
RULES_STRICTER = {r.id: bool(r.stricter) for r in RULES.values()}

__all__ = ["LEVELS", "PairCheck", "check_pair", "pairs_for_level", "canonical", "parse_avro", "parse_fastavro", "qualify_aliases"]

#: level -> (check BACKWARD, check FORWARD, transitive)
LEVELS: dict[str, tuple[bool, bool, bool]] = {
    "BACKWARD": (True, False, False),
    "BACKWARD_TRANSITIVE": (True, False, True),
    "FORWARD": (False, True, False),
    "FORWARD_TRANSITIVE": (False, True, True),
    "FULL": (True, True, False),
    "FULL_TRANSITIVE": (True, True, True),
    "NONE": (False, False, False),
}

_RULE_OF = {
    "name_mismatch": "name-mismatch",
    "fixed_size_mismatch": "fixed-size-mismatch",
    "missing_enum_symbols": "enum-symbol-added-without-default",
    "reader_field_missing_default_value": "reader-field-missing-default",
    "type_mismatch": "type-mismatch",
    "missing_union_branch": "missing-union-branch",
}
_LOGICAL_PARAMS = ("logicalType", "precision", "scale")
_PRIMITIVE = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def parse_avro(schema: Mapping[str, Any] | str, *, references: Sequence[Any] = ()) -> avro.schema.Schema:
    """Parse with Apache avro (names and enum symbols validated).

    ``references``: JSON of named types ``schema`` may reference by name, parsed first into the
    same name table (a registry's schema references).

    Raises:
        avro.errors.AvroException (SchemaParseException, InvalidDefault...) or ValueError for
        an invalid schema. Warnings about ignored logical types are suppressed (the
        logical-type rule compares the declared ``logicalType`` itself).
    """
    data = _json(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = avro.name.Names()
        for ref in references:
            avro.schema.make_avsc_object(qualify_aliases(ref), names)
        return avro.schema.make_avsc_object(qualify_aliases(data), names)


_NAMED = frozenset({"record", "error", "enum", "fixed"})


def _json(schema: Any) -> Any:
    """A schema's JSON from JSON text, or the parsed JSON itself. A string that is not JSON text
    is the JSON of a schema already (``"string"`` as parsed from the file ``"string"``: a
    primitive or a named type's full name, Avro spec "Schema Declaration")."""
    if not isinstance(schema, str):
        return schema
    try:
        data = json.loads(schema)
    except json.JSONDecodeError:
        return schema
    # JSON text of a schema is a string, an object or an array (Avro spec, "Schemas"): "null"
    # read as JSON is None, so the string itself is the schema (the primitive type null)
    return data if isinstance(data, (str, Mapping, list)) else schema


def canonical(schema: Any) -> Any:
    """``schema`` (JSON) in the form two equal schemas share: names fully qualified, no
    ``namespace`` attributes (:func:`casestream.events.catalog.normalize`), and a primitive
    written as ``{"type": "int"}`` reduced to ``"int"`` (Avro specification, "Parsing
    Canonical Form": [PRIMITIVES]). Docs, defaults, aliases and other attributes are kept, so
    only a change of layout (whitespace, attribute order, namespace placement) compares equal.
    """
    from casestream.events.catalog import normalize

    return _collapse(normalize(schema))


def _collapse(s: Any) -> Any:
    if isinstance(s, list):
        return [_collapse(b) for b in s]
    if not isinstance(s, Mapping):
        return s
    if set(s) == {"type"} and s["type"] in _PRIMITIVE:
        return s["type"]
    out = dict(s)
    if isinstance(out.get("fields"), list):
        out["fields"] = [{**fl, "type": _collapse(fl.get("type"))} if isinstance(fl, Mapping) else fl
                         for fl in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _collapse(out[key])
    if isinstance(out.get("type"), (list, Mapping)):
        out["type"] = _collapse(out["type"])
    return out


def qualify_aliases(schema: Any, namespace: str | None = None) -> Any:
    """``schema`` (JSON) with every alias of a named type fully qualified.

    Avro 1.12 specification, "Aliases": an alias of a named type "may be fully qualified or
    relative to the namespace of the name it aliases" — so ``{"name": "b.Y", "aliases": ["X"]}``
    aliases ``b.X``. Apache avro for Python compares aliases with the writer's full name
    without this step (Java's ``Schema.Parser`` qualifies them); field aliases are plain names.
    Returns ``schema`` itself when nothing changes.
    """
    if isinstance(schema, list):
        out = [qualify_aliases(b, namespace) for b in schema]
        return schema if all(a is b for a, b in zip(out, schema)) else out
    if not isinstance(schema, Mapping):
        return schema
    t = schema.get("type")
    changed: dict[str, Any] = {}
    ns = namespace
    if t in _NAMED and isinstance(schema.get("name"), str):
        name = schema["name"]
        ns = name.rpartition(".")[0] if "." in name else (schema.get("namespace") or namespace) or None
        aliases = schema.get("aliases")
        if isinstance(aliases, list) and ns:
            full = [a if not isinstance(a, str) or "." in a else f"{ns}.{a}" for a in aliases]
            if full != aliases:
                changed["aliases"] = full
        if isinstance(schema.get("fields"), list):
            fields = []
            for f in schema["fields"]:
                if isinstance(f, Mapping) and "type" in f:
                    ft = qualify_aliases(f["type"], ns)
                    fields.append(f if ft is f["type"] else {**f, "type": ft})
                else:
                    fields.append(f)
            if any(a is not b for a, b in zip(fields, schema["fields"])):
                changed["fields"] = fields
    elif t == "array":
        inner = qualify_aliases(schema.get("items"), namespace)
        if inner is not schema.get("items"):
            changed["items"] = inner
    elif t == "map":
        inner = qualify_aliases(schema.get("values"), namespace)
        if inner is not schema.get("values"):
            changed["values"] = inner
    elif isinstance(t, (list, Mapping)):
        inner = qualify_aliases(t, namespace)
        if inner is not t:
            changed["type"] = inner
    return {**schema, **changed} if changed else schema


def parse_fastavro(schema: Mapping[str, Any] | str, *, references: Sequence[Any] = ()) -> Any:
    """Parse with fastavro (``references`` first, into the same ``named_schemas``); raises as fastavro does."""
    data = _json(schema)
    named: dict[str, Any] = {}
    for ref in references:  # parse_schema builds new dicts: the input is not changed
        fastavro.parse_schema(ref, named_schemas=named)
    return fastavro.parse_schema(data, named_schemas=named)


@dataclass(frozen=True, slots=True)
class PairCheck:
    """One (reader index, writer index, direction) pair to check; direction is BACKWARD or FORWARD."""

    reader: int
    writer: int
    direction: str


def pairs_for_level(level: str, new: int) -> list[PairCheck]:
    """Pairs to check when version index ``new`` (0-based) is added under ``level``.

    BACKWARD: (reader=new, writer=earlier); FORWARD: (reader=earlier, writer=new); earlier =
    ``new-1`` only, or every index < new when transitive. Raises KeyError for an unknown level.
    """
    backward, forward, transitive = LEVELS[level]
    earlier = range(new) if transitive else range(max(0, new - 1), new)
    out: list[PairCheck] = []
    for old in earlier:
        if backward:
            out.append(PairCheck(reader=new, writer=old, direction="BACKWARD"))
        if forward:
            out.append(PairCheck(reader=old, writer=new, direction="FORWARD"))
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _names_match(reader: Any, writer: Any) -> bool:
    # Same rule as avro.compatibility.schema_name_equals (unqualified name, or reader aliases).
    # (aliases are fully qualified by parse_avro: qualify_aliases)
    aliases = reader.props.get("aliases") or []
    return reader.name == writer.name or writer.fullname in aliases


def _lookup_writer_field(writer_fields: Mapping[str, Any], reader_field: Any) -> Any:
    f = writer_fields.get(reader_field.name)
    if f is not None:
        return f
    for alias in reader_field.props.get("aliases") or []:
        f = writer_fields.get(alias)
        if f is not None:
            return f
    return None


def _signature(s: Any) -> str:
    if s.type == "union":
        return "union(" + ",".join(_signature(b) for b in s.schemas) + ")"
    if s.type in ("record", "enum", "fixed", "error"):
        return s.type + ":" + s.name
    if s.type == "array":
        return "array(" + _signature(s.items) + ")"
    if s.type == "map":
        return "map(" + _signature(s.values) + ")"
    return str(s.type)


#: writer type -> reader types it is promoted to (Avro spec, "Schema Resolution")
_PROMOTIONS = {
    "int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
    "string": ("bytes",), "bytes": ("string",),
}


def _resolved_branch(branches: Sequence[Any], writer: Any) -> Any:
    """The reader branch that reads a ``writer`` value (Avro spec, "Schema Resolution": the
    first reader branch matching the writer's schema), or None. As Java's resolver does, a
    branch of the same type wins over an earlier one the writer's type is promoted to."""
    sig = _signature(writer)
    exact = next((x for x in branches if _signature(x) == sig), None)
    if exact is not None:
        return exact
    targets = _PROMOTIONS.get(writer.type, ())
    return next((x for x in branches if x.type in targets), None)


def _flags(s: Any, cache: dict[int, Any]) -> tuple[bool, bool]:
    """(holds a logical type, holds bytes) anywhere in ``s``, cached by ``id`` (the schema is kept
    in the cache so the id stays its own). A recursive reference counts as both (conservative)."""
    hit = cache.get(id(s))
    if hit is not None:
        return hit[1]  # type: ignore[no-any-return]
    cache[id(s)] = (s, (True, True))
    t = s.type
    if t in ("record", "error"):
        children = [f.type for f in s.fields]
    elif t == "union":
        children = list(s.schemas)
    elif t == "array":
        children = [s.items]
    elif t == "map":
        children = [s.values]
    else:
        children = []
    logical, has_bytes = "logicalType" in s.props, t == "bytes"
    for c in children:
        cl, cb = _flags(c, cache)
        logical, has_bytes = logical or cl, has_bytes or cb
    cache[id(s)] = (s, (logical, has_bytes))
    return logical, has_bytes


class _Walker:
    def __init__(self, reader_is_new: bool, labels: tuple[str, str], *, stricter_only: bool = False,
                 cache: dict[int, Any] | None = None):
        # stricter_only: the checker found the pair compatible; look only for the stricter rules
        self.stricter_only = stricter_only
        self.cache: dict[int, Any] = cache if cache is not None else {}
        self.reader_is_new = reader_is_new
        self.reader_label, self.writer_label = labels
        self.issues: list[Issue] = []
        self.seen: set[tuple[int, int]] = set()

    def walk(self, r: Any, w: Any, path: str) -> None:
        key = (id(r), id(w))
        if key in self.seen:  # recursive types
            return
        self.seen.add(key)
        if r.type in ("record", "error") and w.type in ("record", "error"):
            self.record(r, w, path)
        elif r.type == "enum" and w.type == "enum" and _names_match(r, w):
            self.enum(r, w, path)
        elif not self.stricter_only and "union" in (r.type, w.type):
            self.union(r, w, path)
        else:
            self.leaf(r, w, path)

    def union(self, r: Any, w: Any, path: str) -> None:
        """Each writer branch the reader cannot read: a named type that the reader branch it
        resolves to (same name) cannot read is walked into, so the finding names the field;
        only a writer branch no reader branch matches is a ``missing-union-branch``."""
        readers = r.schemas if r.type == "union" else [r]
        checker = ReaderWriterCompatibilityChecker()
        for b in w.schemas if w.type == "union" else [w]:
            if checker.get_compatibility(r, b).compatibility is SchemaCompatibilityType.compatible:
                self.logical(r, b, path)
                continue
            match = _resolved_branch(readers, b)
            if match is not None and match.type == b.type and b.type in ("record", "error", "enum"):
                self.walk(match, b, path)
            else:
                self.leaf(r, b, path)

    def record(self, r: Any, w: Any, path: str) -> None:
        if not _names_match(r, w):
            self.issues.append(
                Issue("name-mismatch", path or "<record>", f"record {r.fullname} cannot read record {w.fullname}")
            )
            return
        matched: set[str] = set()
        missing = []
        writer_fields = {wf.name: wf for wf in w.fields}  # avro's fields_dict is rebuilt on every access
        for rf in r.fields:
            wf = _lookup_writer_field(writer_fields, rf)
            if wf is None:
                if not rf.has_default:
                    missing.append(rf)
                continue
            matched.add(wf.name)
            if self.stricter_only and not self.may_be_stricter(rf.type, wf.type):
                continue
            self.walk(rf.type, wf.type, _join(path, rf.name))
        unmatched = [wf for wf in w.fields if wf.name not in matched]
        for rf in missing:
            self.missing_field(rf, unmatched, path, r.fields.index(rf), w.fields)

    def may_be_stricter(self, r: Any, w: Any) -> bool:
        """Whether a stricter rule can apply below (r, w): a logical type on either side, or bytes written."""
        r_logical, _ = _flags(r, self.cache)
        w_logical, w_bytes = _flags(w, self.cache)
        return r_logical or w_logical or w_bytes

    def missing_field(self, rf: Any, unmatched: list[Any], path: str, index: int, writer_fields: list[Any]) -> None:
        """Report a reader field the writer does not write; guess a rename (each writer field claimed once)."""
        fpath = _join(path, rf.name)
        renamed_to = [wf for wf in unmatched if rf.name in (wf.props.get("aliases") or [])]
        same = sorted(
            (wf for wf in unmatched if _signature(wf.type) == _signature(rf.type)),
            key=lambda wf: abs(writer_fields.index(wf) - index),
        )
        claimed = renamed_to[:1] or same[:1]
        for wf in claimed:
            unmatched.remove(wf)
        rl, wl = self.reader_label, self.writer_label
        if self.reader_is_new:
            if same:
                self.issues.append(
                    Issue(
                        "field-renamed-without-alias",
                        fpath,
                        f"{rl} field `{rf.name}` has no default and {wl} does not write it; "
                        f"if it renames {wl} field `{same[0].name}`, add \"aliases\": [\"{same[0].name}\"]",
                    )
                )
            else:
                self.issues.append(
                    Issue(
                        "reader-field-missing-default",
                        fpath,
                        f"field `{rf.name}` was added in {rl} without a default: {rl} cannot read {wl} data",
                    )
                )
            return
        note = ""
        if renamed_to:
            note = (
                f" (renamed to `{renamed_to[0].name}` in {wl}: its alias helps {wl} readers only)"
            )
        elif same:
            note = f" (renamed to `{same[0].name}` in {wl}?)"
        self.issues.append(
            Issue(
                "field-removed-without-default",
                fpath,
                f"{wl} no longer writes `{rf.name}`{note}, which has no default in {rl}: {rl} readers cannot read {wl} data",
            )
        )

    def enum(self, r: Any, w: Any, path: str) -> None:
        extra = [s for s in w.symbols if s not in r.symbols]
        default = r.props.get("default")
        if extra and not (default and default in r.symbols):
            rule = "enum-symbol-removed" if self.reader_is_new else "enum-symbol-added-without-default"
            self.issues.append(
                Issue(
                    rule,
                    path,
                    f"{self.writer_label} may write enum {w.fullname} symbol(s) {extra} that {self.reader_label} "
                    f"lacks, and {self.reader_label}'s enum has no default",
                )
            )

    def leaf(self, r: Any, w: Any, path: str) -> None:
        if self.stricter_only:
            self.logical(r, w, path)
            return
        result = ReaderWriterCompatibilityChecker().get_compatibility(r, w)
        if result.compatibility is SchemaCompatibilityType.incompatible:
            kinds = sorted({i.value for i in result.incompatibilities})
            locations = sorted(loc for loc in result.locations if loc not in ("", "/"))
            where = f" at {', '.join(locations)}" if locations else ""
            detail = "; ".join(sorted(result.messages))
            for kind in kinds:
                rule = _RULE_OF.get(kind, "incompatible")
                if rule == "enum-symbol-added-without-default" and self.reader_is_new:
                    rule = "enum-symbol-removed"
                self.issues.append(
                    Issue(
                        rule,
                        path,
                        f"{self.reader_label} ({_signature(r)}) cannot read {self.writer_label} ({_signature(w)}){where}: {detail}",
                    )
                )
            return
        self.logical(r, w, path)

    def logical(self, r: Any, w: Any, path: str) -> None:
        """Compare logical types where the underlying types match (the checker ignores them)."""
        if r.type == "union" or w.type == "union":
            rb = r.schemas if r.type == "union" else [r]
            wb = w.schemas if w.type == "union" else [w]
            for b in wb:
                match = _resolved_branch(rb, b)
                if match is not None:
                    self.logical(match, b, path)
            return
        if r.type != w.type:
            # a promotion (int -> long, float -> double, string <-> bytes): the checker accepts it,
            # but a logical type changed with it (date -> timestamp-millis) reinterprets the value
            if r.type in _PRIMITIVE and w.type in _PRIMITIVE:
                self.compare_logical(r, w, path)
                if (w.type, r.type) == ("bytes", "string"):
                    self.issues.append(Issue(
                        "bytes-read-as-string", path,
                        f"{self.writer_label} writes bytes that {self.reader_label} decodes as UTF-8 text: "
                        "bytes that are not UTF-8 fail to decode"))
            return
        if r.type == "array":
            self.logical(r.items, w.items, path)
        elif r.type == "map":
            self.logical(r.values, w.values, path)
        elif r.type in ("record", "error"):
            self.walk(r, w, path)
        else:
            self.compare_logical(r, w, path)

    def compare_logical(self, r: Any, w: Any, path: str) -> None:
        rp, wp = r.props, w.props
        if "logicalType" not in rp and "logicalType" not in wp:
            return
        rl = {k: r.props.get(k) for k in _LOGICAL_PARAMS if r.props.get(k) is not None}
        wl = {k: w.props.get(k) for k in _LOGICAL_PARAMS if w.props.get(k) is not None}
        if rl != wl:
            base = r.type if r.type == w.type else f"{w.type} (read as {r.type})"
            self.issues.append(
                Issue(
                    "logical-type-changed",
                    path,
                    f"{self.writer_label} writes {base} as {_describe(wl)}, {self.reader_label} reads it as {_describe(rl)}",
                )
            )


def _describe(lt: Mapping[str, Any]) -> str:
    if not lt:
        return "a plain value (no logicalType)"
    extra = ", ".join(f"{k}={v}" for k, v in lt.items() if k != "logicalType")
    return f"{lt.get('logicalType')}" + (f" ({extra})" if extra else "")


def check_pair(
    reader: avro.schema.Schema,
    writer: avro.schema.Schema,
    *,
    reader_is_new: bool = True,
    labels: tuple[str, str] = ("reader", "writer"),
    cache: dict[int, Any] | None = None,
) -> list[Issue]:
    """Check that ``reader`` can read data written with ``writer``.

    Args:
        reader, writer: schemas parsed by :func:`parse_avro`.
        reader_is_new: True for a BACKWARD pair (reader = the newer version), False for a
            FORWARD pair; selects rule ids and wording for missing fields.
        labels: how messages name the reader and the writer (e.g. ``("v3", "v2")``).
        cache: a dict shared by the checks of one history (which parts of each schema hold a
            logical type or bytes); keeps those schemas alive while it lives.

    Returns:
        Issues with field paths (empty = compatible). An issue-free result always agrees with
        ``ReaderWriterCompatibilityChecker`` saying compatible; the stricter rules only add issues.
    """
    verdict = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    compatible = verdict.compatibility is SchemaCompatibilityType.compatible
    # One checker call decides; the walk names paths and rules (of an incompatible pair), or
    # looks only for the stricter rules (of a compatible one) without calling the checker again.
    walker = _Walker(reader_is_new, labels, stricter_only=compatible, cache=cache)
    walker.walk(reader, writer, "")
    if not compatible and all(RULES_STRICTER.get(i.rule, False) for i in walker.issues):
        walker.issues.append(  # safety net: never be laxer than the checker
            Issue("incompatible", "", f"{labels[0]} cannot read {labels[1]}: {'; '.join(sorted(verdict.messages))}")
        )
    return walker.issues


def check_history(
    schemas: Sequence[avro.schema.Schema], level: str, *, labels: Sequence[str] | None = None, new: int | None = None
) -> list[tuple[PairCheck, list[Issue]]]:
    """Check version ``new`` (default: each version > first, in order) against earlier ones under ``level``.

    Returns ``[(pair, issues)]`` for every pair checked (issues empty when compatible).
    """
    names = list(labels) if labels is not None else [f"v{i + 1}" for i in range(len(schemas))]
    targets = [new] if new is not None else list(range(1, len(schemas)))
    out = []
    cache: dict[int, Any] = {}
    for k in targets:
        for pair in pairs_for_level(level, k):
            issues = check_pair(
                schemas[pair.reader],
                schemas[pair.writer],
                reader_is_new=pair.direction == "BACKWARD",
                labels=(names[pair.reader], names[pair.writer]),
                cache=cache,
            )
            out.append((pair, issues))
    return out
