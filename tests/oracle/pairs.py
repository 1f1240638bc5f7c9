"""The differential corpus: (old, new) Avro schema pairs covering every kind of change.

Pure data built by small helpers. Each :class:`Pair` is one schema evolution step; the oracle
test checks it in both directions (BACKWARD: new reads old; FORWARD: old reads new) with the
gate, with Apache Avro's Java ``SchemaCompatibility`` and by decoding a datum with fastavro.
Kinds: fields, defaults, promotions, enums, unions, primitive schemas, nested and recursive records,
arrays/maps, fixed, aliases, namespaces, logical types, bytes defaults, schema references.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
SAMPLE_DEFAULT = {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
                  "bytes": "", "string": ""}


@dataclass(frozen=True)
class Pair:
    """``id`` (kind/case), ``old`` and ``new`` schema JSON, ``refs``: named types both may reference."""

    id: str
    old: Any
    new: Any
    refs: tuple[Any, ...] = field(default=())


def rec(fields: list[Any], name: str = "R", ns: str | None = "t", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "record", "name": name, "fields": fields, **extra}
    if ns is not None:
        out["namespace"] = ns
    return out


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


BASE = [f("id", "string"), f("n", "int")]


def _fields() -> list[Pair]:
    out = []
    added = {
        "int": 1, "long": 2, "string": "x", "boolean": True, "double": 1.5, "bytes": "\u00ff",
        "array": [], "map": {}, "enum": "A", "union-null": None, "record": {"x": 1}}
    types = {
        "int": "int", "long": "long", "string": "string", "boolean": "boolean", "double": "double",
        "bytes": "bytes", "array": {"type": "array", "items": "int"}, "map": {"type": "map", "values": "string"},
        "enum": {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "union-null": ["null", "string"],
        "record": rec([f("x", "int")], name="Inner")}
    for kind, t in types.items():
        out.append(Pair(f"fields/add-{kind}-with-default", rec(BASE), rec([*BASE, f("extra", t, default=added[kind])])))
        out.append(Pair(f"fields/add-{kind}-without-default", rec(BASE), rec([*BASE, f("extra", t)])))
    out.append(Pair("fields/remove-without-default", rec([*BASE, f("x", "string")]), rec(BASE)))
    out.append(Pair("fields/remove-with-default", rec([*BASE, f("x", "string", default="")]), rec(BASE)))
    out.append(Pair("fields/remove-all", rec(BASE), rec([])))
    out.append(Pair("fields/reorder", rec(BASE), rec(list(reversed(BASE)))))
    out.append(Pair("fields/rename-without-alias", rec(BASE), rec([f("id", "string"), f("count", "int")])))
    out.append(Pair("fields/rename-with-alias", rec(BASE), rec([f("id", "string"), f("count", "int", aliases=["n"])])))
    out.append(Pair("fields/rename-with-alias-and-default", rec(BASE),
                    rec([f("id", "string"), f("count", "int", aliases=["n"], default=0)])))
    out.append(Pair("fields/doc-only", rec(BASE), rec(BASE, doc="documented")))
    out.append(Pair("fields/same", rec(BASE), rec(BASE)))
    return out


def _defaults() -> list[Pair]:
    return [
        Pair("defaults/change-value", rec([*BASE, f("x", "int", default=1)]), rec([*BASE, f("x", "int", default=2)])),
        Pair("defaults/add-default", rec([*BASE, f("x", "int")]), rec([*BASE, f("x", "int", default=0)])),
        Pair("defaults/drop-default", rec([*BASE, f("x", "int", default=0)]), rec([*BASE, f("x", "int")])),
        Pair("defaults/union-null-first", rec(BASE), rec([*BASE, f("x", ["null", "int"], default=None)])),
        Pair("defaults/union-value-first", rec(BASE), rec([*BASE, f("x", ["int", "null"], default=5)])),
        Pair("defaults/bytes-code-point-255", rec(BASE), rec([*BASE, f("x", "bytes", default="\u00ff\u0000")])),
        Pair("defaults/bytes-code-point-256", rec(BASE), rec([*BASE, f("x", "bytes", default="\u0100")])),
        Pair("defaults/fixed-code-points", rec(BASE),
             rec([*BASE, f("x", {"type": "fixed", "name": "F2", "size": 2}, default="\u00ff\u00fe")])),
        Pair("defaults/fixed-code-point-above-255", rec(BASE),
             rec([*BASE, f("x", {"type": "fixed", "name": "F2", "size": 2}, default="\u0101\u00fe")])),
        Pair("defaults/record-default", rec(BASE),
             rec([*BASE, f("x", rec([f("a", "int")], name="D"), default={"a": 1})])),
        Pair("defaults/array-default", rec(BASE), rec([*BASE, f("x", {"type": "array", "items": "long"}, default=[1, 2])])),
    ]


def _promotions() -> list[Pair]:
    out = []
    for a, b in itertools.permutations(PRIMITIVES, 2):
        out.append(Pair(f"promotions/{a}-to-{b}", rec([f("id", "string"), f("v", a)]), rec([f("id", "string"), f("v", b)])))
    return out


def _enum(symbols: list[str], name: str = "Color", **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": symbols, **extra}


def _enums() -> list[Pair]:
    def r(e: dict[str, Any]) -> dict[str, Any]:
        return rec([f("id", "string"), f("c", e)])

    return [
        Pair("enums/add-symbol", r(_enum(["RED", "GREEN"])), r(_enum(["RED", "GREEN", "BLUE"]))),
        Pair("enums/add-symbol-old-has-default", r(_enum(["RED", "GREEN"], default="RED")),
             r(_enum(["RED", "GREEN", "BLUE"], default="RED"))),
        Pair("enums/remove-symbol", r(_enum(["RED", "GREEN", "BLUE"])), r(_enum(["RED", "GREEN"]))),
        Pair("enums/remove-symbol-new-has-default", r(_enum(["RED", "GREEN", "BLUE"])),
             r(_enum(["RED", "GREEN"], default="RED"))),
        Pair("enums/reorder-symbols", r(_enum(["RED", "GREEN"])), r(_enum(["GREEN", "RED"]))),
        Pair("enums/add-default", r(_enum(["RED", "GREEN"])), r(_enum(["RED", "GREEN"], default="GREEN"))),
        Pair("enums/rename-without-alias", r(_enum(["RED"])), r(_enum(["RED"], name="Colour"))),
        Pair("enums/rename-with-alias", r(_enum(["RED"])), r(_enum(["RED"], name="Colour", aliases=["Color"]))),
        Pair("enums/rename-with-qualified-alias", r(_enum(["RED"])),
             r(_enum(["RED"], name="Colour", aliases=["t.Color"]))),
        Pair("enums/to-string", r(_enum(["RED"])), rec([f("id", "string"), f("c", "string")])),
        Pair("enums/string-to-enum", rec([f("id", "string"), f("c", "string")]), r(_enum(["RED"]))),
    ]


def _unions() -> list[Pair]:
    def r(t: Any, **extra: Any) -> dict[str, Any]:
        return rec([f("id", "string"), f("u", t, **extra)])

    return [
        Pair("unions/add-branch", r(["null", "string"]), r(["null", "string", "int"])),
        Pair("unions/remove-branch", r(["null", "string", "int"]), r(["null", "string"])),
        Pair("unions/reorder-branches", r(["null", "string"]), r(["string", "null"])),
        Pair("unions/primitive-to-union", r("string"), r(["null", "string"])),
        Pair("unions/union-to-primitive", r(["null", "string"]), r("string")),
        Pair("unions/primitive-to-union-without-it", r("string"), r(["null", "int"])),
        Pair("unions/promote-branch", r(["null", "int"]), r(["null", "long"])),
        Pair("unions/narrow-branch", r(["null", "long"]), r(["null", "int"])),
        Pair("unions/add-record-branch", r(["null", "string"]), r(["null", "string", rec([f("a", "int")], name="B")])),
        Pair("unions/record-branch-gains-field", r(["null", rec([f("a", "int")], name="B")]),
             r(["null", rec([f("a", "int"), f("b", "int", default=0)], name="B")])),
        Pair("unions/record-branch-gains-required", r(["null", rec([f("a", "int")], name="B")]),
             r(["null", rec([f("a", "int"), f("b", "int")], name="B")])),
        Pair("unions/int-to-union-of-long", r("int"), r(["null", "long"])),
        Pair("unions/record-to-union-gains-required", r(rec([f("a", "int")], name="B")),
             r(["null", rec([f("a", "int"), f("b", "int")], name="B")])),
    ]


def _primitives() -> list[Pair]:
    # a whole schema that is a JSON string naming a primitive (a key subject's usual schema)
    out = [Pair(f"primitives/{p}-same", p, p) for p in PRIMITIVES]
    out.append(Pair("primitives/null-to-union", "null", ["null", "string"]))
    out.append(Pair("primitives/int-to-long", "int", "long"))
    out.append(Pair("primitives/null-to-string", "null", "string"))
    return out


def _nested() -> list[Pair]:
    def outer(inner_fields: list[Any], **extra: Any) -> dict[str, Any]:
        return rec([f("id", "string"), f("addr", rec(inner_fields, name="Address", **extra))])

    a = [f("street", "string"), f("city", "string")]
    return [
        Pair("nested/add-field-with-default", outer(a), outer([*a, f("zip", "string", default="")])),
        Pair("nested/add-field-without-default", outer(a), outer([*a, f("zip", "string")])),
        Pair("nested/remove-field", outer(a), outer(a[:1])),
        Pair("nested/promote-field", outer([*a, f("no", "int")]), outer([*a, f("no", "long")])),
        Pair("nested/narrow-field", outer([*a, f("no", "long")]), outer([*a, f("no", "int")])),
        Pair("nested/rename-record-without-alias", outer(a),
             rec([f("id", "string"), f("addr", rec(a, name="Location"))])),
        Pair("nested/rename-record-with-alias", outer(a),
             rec([f("id", "string"), f("addr", rec(a, name="Location", aliases=["Address"]))])),
        Pair("nested/nested-namespace-change", outer(a),
             rec([f("id", "string"), f("addr", rec(a, name="Address", ns="other"))])),
        Pair("nested/deep-add-required", rec([f("a", rec([f("b", rec([f("c", "int")], name="C"))], name="B"))]),
             rec([f("a", rec([f("b", rec([f("c", "int"), f("d", "int")], name="C"))], name="B"))])),
        Pair("nested/deep-add-optional", rec([f("a", rec([f("b", rec([f("c", "int")], name="C"))], name="B"))]),
             rec([f("a", rec([f("b", rec([f("c", "int"), f("d", "int", default=1)], name="C"))], name="B"))])),
    ]


def _recursive() -> list[Pair]:
    def node(extra: list[Any]) -> dict[str, Any]:
        return rec([f("value", "int"), *extra, f("next", ["null", "Node"], default=None)], name="Node")

    def tree(extra: list[Any]) -> dict[str, Any]:
        return rec([f("label", "string"), *extra, f("children", {"type": "array", "items": "Tree"})], name="Tree")

    return [
        Pair("recursive/list-add-with-default", node([]), node([f("w", "int", default=0)])),
        Pair("recursive/list-add-without-default", node([]), node([f("w", "int")])),
        Pair("recursive/list-promote", node([f("w", "int")]), node([f("w", "long")])),
        Pair("recursive/tree-add-with-default", tree([]), tree([f("w", "string", default="")])),
        Pair("recursive/tree-add-without-default", tree([]), tree([f("w", "string")])),
        Pair("recursive/tree-remove-field", tree([f("w", "string")]), tree([])),
    ]


def _collections() -> list[Pair]:
    def r(t: Any) -> dict[str, Any]:
        return rec([f("id", "string"), f("c", t)])

    arr = {"type": "array", "items": "int"}
    return [
        Pair("collections/array-promote-items", r(arr), r({"type": "array", "items": "long"})),
        Pair("collections/array-narrow-items", r({"type": "array", "items": "long"}), r(arr)),
        Pair("collections/map-promote-values", r({"type": "map", "values": "float"}), r({"type": "map", "values": "double"})),
        Pair("collections/map-narrow-values", r({"type": "map", "values": "double"}), r({"type": "map", "values": "float"})),
        Pair("collections/array-to-map", r(arr), r({"type": "map", "values": "int"})),
        Pair("collections/map-to-array", r({"type": "map", "values": "int"}), r(arr)),
        Pair("collections/array-of-records-add-optional",
             r({"type": "array", "items": rec([f("a", "int")], name="Item")}),
             r({"type": "array", "items": rec([f("a", "int"), f("b", "int", default=0)], name="Item")})),
        Pair("collections/array-of-records-add-required",
             r({"type": "array", "items": rec([f("a", "int")], name="Item")}),
             r({"type": "array", "items": rec([f("a", "int"), f("b", "int")], name="Item")})),
        Pair("collections/map-of-unions-add-branch", r({"type": "map", "values": ["null", "int"]}),
             r({"type": "map", "values": ["null", "int", "string"]})),
        Pair("collections/map-of-unions-remove-branch", r({"type": "map", "values": ["null", "int", "string"]}),
             r({"type": "map", "values": ["null", "int"]})),
        Pair("collections/array-to-int", r(arr), r("int")),
    ]


def _fixed() -> list[Pair]:
    def r(t: Any) -> dict[str, Any]:
        return rec([f("id", "string"), f("h", t)])

    fx = {"type": "fixed", "name": "Hash", "size": 16}
    return [
        Pair("fixed/same", r(fx), r(dict(fx))),
        Pair("fixed/size-change", r(fx), r({**fx, "size": 32})),
        Pair("fixed/rename-without-alias", r(fx), r({**fx, "name": "Digest"})),
        Pair("fixed/rename-with-alias", r(fx), r({**fx, "name": "Digest", "aliases": ["Hash"]})),
        Pair("fixed/to-bytes", r(fx), r("bytes")),
        Pair("fixed/bytes-to-fixed", r("bytes"), r(fx)),
        Pair("fixed/namespace-change", r(fx), r({**fx, "namespace": "other"})),
    ]


def _aliases() -> list[Pair]:
    old = rec(BASE, name="Order", ns="com.acme")
    return [
        Pair("aliases/record-rename-without-alias", old, rec(BASE, name="Purchase", ns="com.acme")),
        Pair("aliases/record-rename-unqualified-alias", old, rec(BASE, name="Purchase", ns="com.acme", aliases=["Order"])),
        Pair("aliases/record-rename-qualified-alias", old,
             rec(BASE, name="Purchase", ns="com.acme", aliases=["com.acme.Order"])),
        Pair("aliases/record-rename-alias-other-namespace", old,
             rec(BASE, name="Purchase", ns="com.acme", aliases=["org.other.Order"])),
        Pair("aliases/record-move-namespace-with-alias", old,
             rec(BASE, name="Order", ns="com.acme.v2", aliases=["com.acme.Order"])),
        Pair("aliases/record-rename-and-move-unqualified-alias", old,
             rec(BASE, name="Purchase", ns="com.acme.v2", aliases=["Order"])),
        Pair("aliases/dotted-name-unqualified-alias", old, rec(BASE, name="com.acme.Purchase", ns=None, aliases=["Order"])),
        Pair("aliases/field-alias-unused", rec(BASE), rec([f("id", "string", aliases=["ident"]), f("n", "int")])),
        Pair("aliases/nested-record-unqualified-alias",
             rec([f("x", rec([f("a", "int")], name="Inner", ns="com.acme.inner"))], name="Outer", ns="com.acme"),
             rec([f("x", rec([f("a", "int")], name="Inner2", ns="com.acme.inner", aliases=["Inner"]))], name="Outer",
                 ns="com.acme")),
        Pair("aliases/union-record-unqualified-alias",
             rec([f("x", ["null", rec([f("a", "int")], name="Inner", ns="com.acme")], default=None)], name="Outer"),
             rec([f("x", ["null", rec([f("a", "int")], name="Inner2", ns="com.acme", aliases=["Inner"])],
                    default=None)], name="Outer")),
    ]


def _namespaces() -> list[Pair]:
    return [
        Pair("namespaces/top-level-change", rec(BASE, ns="com.acme"), rec(BASE, ns="com.other")),
        Pair("namespaces/drop-namespace", rec(BASE, ns="com.acme"), rec(BASE, ns=None)),
        Pair("namespaces/dotted-name-equivalent", rec(BASE, ns="com.acme"), rec(BASE, name="com.acme.R", ns=None)),
        Pair("namespaces/inherited-by-nested", rec([f("x", rec([f("a", "int")], name="In"))], ns="com.acme"),
             rec([f("x", rec([f("a", "int")], name="In", ns="com.acme"))], ns="com.acme")),
        Pair("namespaces/nested-enum-namespace-change",
             rec([f("c", _enum(["A"], name="E"))], ns="com.acme"),
             rec([f("c", {**_enum(["A"], name="E"), "namespace": "com.other"})], ns="com.acme")),
    ]


def _logical() -> list[Pair]:
    def r(t: Any) -> dict[str, Any]:
        return rec([f("id", "string"), f("v", t)])

    def lt(base: str, name: str, **extra: Any) -> dict[str, Any]:
        return {"type": base, "logicalType": name, **extra}

    dec = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    return [
        Pair("logical/date-to-timestamp-millis", r(lt("int", "date")), r(lt("long", "timestamp-millis"))),
        Pair("logical/time-millis-to-time-micros", r(lt("int", "time-millis")), r(lt("long", "time-micros"))),
        Pair("logical/timestamp-millis-to-micros", r(lt("long", "timestamp-millis")), r(lt("long", "timestamp-micros"))),
        Pair("logical/timestamp-unchanged", r(lt("long", "timestamp-millis")), r(lt("long", "timestamp-millis"))),
        Pair("logical/plain-long-gains-timestamp", r("long"), r(lt("long", "timestamp-millis"))),
        Pair("logical/timestamp-to-plain-long", r(lt("long", "timestamp-millis")), r("long")),
        Pair("logical/int-to-timestamp-millis", r("int"), r(lt("long", "timestamp-millis"))),
        Pair("logical/decimal-scale-change", r(dec), r({**dec, "scale": 3})),
        Pair("logical/decimal-precision-change", r(dec), r({**dec, "precision": 12})),
        Pair("logical/uuid-on-string", r("string"), r(lt("string", "uuid"))),
        Pair("logical/local-timestamp-to-timestamp", r(lt("long", "local-timestamp-millis")),
             r(lt("long", "timestamp-millis"))),
        Pair("logical/date-in-union", r(["null", lt("int", "date")]), r(["null", lt("long", "timestamp-millis")])),
        Pair("logical/date-to-union-timestamp", r(lt("int", "date")), r(["null", lt("long", "timestamp-millis")])),
        Pair("logical/bytes-to-union-string", r("bytes"), r(["null", "string"])),
    ]


MONEY = rec([f("units", "long"), f("currency", "string")], name="Money", ns="com.acme.common")


def _references() -> list[Pair]:
    refs = (MONEY,)
    return [
        Pair("references/same", rec([f("id", "string"), f("m", "com.acme.common.Money")]),
             rec([f("id", "string"), f("m", "com.acme.common.Money")]), refs),
        Pair("references/add-optional-ref-field", rec([f("id", "string")]),
             rec([f("id", "string"), f("m", ["null", "com.acme.common.Money"], default=None)]), refs),
        Pair("references/add-required-ref-field", rec([f("id", "string")]),
             rec([f("id", "string"), f("m", "com.acme.common.Money")]), refs),
        Pair("references/ref-to-inline-other-name", rec([f("id", "string"), f("m", "com.acme.common.Money")]),
             rec([f("id", "string"), f("m", rec([f("units", "long")], name="Amount"))]), refs),
    ]


def corpus() -> list[Pair]:
    """Every pair, ids unique."""
    pairs = [*_fields(), *_defaults(), *_promotions(), *_enums(), *_unions(), *_primitives(), *_nested(), *_recursive(),
             *_collections(), *_fixed(), *_aliases(), *_namespaces(), *_logical(), *_references()]
    ids = [p.id for p in pairs]
    assert len(ids) == len(set(ids)), "duplicate pair ids"
    return pairs
