"""``values.converts``: which schemas :func:`values.conform` may change a value of (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from fastavro import parse_schema

from casestream.events.values import conform, converts


def _rec(name: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


PLAIN = _rec("ns.Plain", ("title", "string"), ("severity", "int"), ("at", {"type": "string", "logicalType": "uuid"}),
             ("kind", {"type": "enum", "name": "ns.Kind", "symbols": ["A", "B"]}),
             ("note", ["null", "string"]), ("tags", {"type": "array", "items": "string"}),
             ("again", ["null", "ns.Kind"]), ("counts", {"type": "map", "values": "long"}))


@pytest.mark.parametrize("schema", [
    "string", ["null", "long"], PLAIN,
    _rec("ns.Node", ("value", "int"), ("next", ["null", "ns.Node"])),  # recursive: a name defined above
])
def test_schemas_without_bytes_or_time_types_convert_nothing(schema: Any) -> None:
    assert converts(parse_schema(schema)) is False


@pytest.mark.parametrize("schema", [
    "bytes",
    _rec("ns.B", ("blob", "bytes")),
    _rec("ns.F", ("digest", {"type": "fixed", "name": "ns.Digest", "size": 2})),
    _rec("ns.T", ("at", {"type": "long", "logicalType": "timestamp-millis"})),
    _rec("ns.L", ("at", {"type": "long", "logicalType": "local-timestamp-micros"})),
    _rec("ns.D", ("on", {"type": "int", "logicalType": "date"})),
    _rec("ns.U", ("maybe", ["null", "bytes"])),
    _rec("ns.A", ("items", {"type": "array", "items": _rec("ns.Inner", ("blob", "bytes"))})),
    _rec("ns.M", ("by", {"type": "map", "values": {"type": "long", "logicalType": "timestamp-micros"}})),
])
def test_a_reachable_bytes_fixed_or_time_type_converts(schema: Any) -> None:
    assert converts(parse_schema(schema)) is True


def test_a_name_the_schema_does_not_define_is_assumed_to_convert() -> None:
    assert converts({"type": "record", "name": "ns.R", "fields": [{"name": "x", "type": "ns.Elsewhere"}]}) is True


def test_conform_returns_the_very_value_where_converts_says_nothing_changes() -> None:
    schema = parse_schema(PLAIN)
    value = {"title": "t", "severity": 3, "at": "0f8b7c3e-1111-4222-8333-444455556666", "kind": "A",
             "note": None, "tags": ["x"], "again": "B", "counts": {"a": 1}}
    assert not converts(schema) and conform(schema, value) is value
    timed = parse_schema(_rec("ns.T2", ("at", {"type": "long", "logicalType": "timestamp-millis"})))
    assert converts(timed) and conform(timed, {"at": 0}) != {"at": 0}
