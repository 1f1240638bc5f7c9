"""Values against a schema: make resolved values what the schema promises; find naive datetimes.

Pure (stdlib only); schemas are the dicts ``fastavro.parse_schema`` returns (full names, a
named type inlined once and referenced by name after).

:func:`conform` repairs what Avro schema resolution leaves raw: a reader field missing from
the writer takes the reader's *JSON* default (Avro 1.12 specification, "Schema Resolution"),
and the JSON encoding of defaults ("Complex Types" -> "Records", field default table) writes
``bytes`` and ``fixed`` as strings whose code points 0-255 are the byte values, ``long``
``timestamp-millis`` as a number, and so on. fastavro hands those through unconverted, so a
consumer would see ``str`` where ``bytes`` are promised, and re-encoding would fail.

:func:`naive_datetime` finds a ``datetime`` without a time zone in a field whose logical type
is an instant (``timestamp-millis`` / ``-micros`` / ``-nanos``): Avro defines those as UTC
instants ("Logical Types" -> "Timestamps"); a naive value has no defined instant.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

__all__ = ["conform", "converts", "has_instants", "naive_datetime"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_DATE = _dt.date(1970, 1, 1)
_INSTANTS = {"timestamp-millis": 1_000, "timestamp-micros": 1_000_000, "timestamp-nanos": 1_000_000_000}
_LOCAL = {"local-timestamp-millis": 1_000, "local-timestamp-micros": 1_000_000}


def _named(schema: Any, names: dict[str, Any]) -> Any:
    if isinstance(schema, str):
        return names.get(schema, schema)
    if isinstance(schema, Mapping) and schema.get("type") in ("record", "error", "enum", "fixed"):
        names.setdefault(schema["name"], schema)
    return schema


def conform(schema: Any, value: Any, names: dict[str, Any] | None = None) -> Any:
    """``value`` with JSON-encoded defaults turned into the Python values ``schema`` promises.

    Converts ``str`` -> ``bytes`` for ``bytes`` / ``fixed`` (ISO-8859-1, the Avro JSON rule),
    numbers -> aware ``datetime`` for instant logical types, -> naive ``datetime`` for local
    timestamps, -> ``date`` for ``date``; recurses into records, arrays, maps and unions
    (a union value takes the first branch it fits, else the first branch: a default matches
    the first branch). Returns new containers where something changed; anything it cannot
    convert is returned unchanged for validation to name.
    """
    names = {} if names is None else names
    schema = _named(schema, names)
    if isinstance(schema, list):
        return _conform_union(schema, value, names)
    if isinstance(schema, str):
        if schema == "bytes" and isinstance(value, str):
            return _latin1(value)
        return value
    t = schema.get("type")
    logical = schema.get("logicalType")
    if logical in _INSTANTS and isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH + _dt.timedelta(microseconds=value * 1_000_000 // _INSTANTS[logical])
    if logical in _LOCAL and isinstance(value, int) and not isinstance(value, bool):
        return (_EPOCH + _dt.timedelta(microseconds=value * 1_000_000 // _LOCAL[logical])).replace(tzinfo=None)
    if logical == "date" and isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH_DATE + _dt.timedelta(days=value)
    if t in ("bytes", "fixed") and isinstance(value, str):
        return _latin1(value)
    if t in ("record", "error") and isinstance(value, Mapping):
        out = None
        for f in schema["fields"]:
            name = f["name"]
            if name in value:
                new = conform(f["type"], value[name], names)
                if new is not value[name]:
                    out = dict(value) if out is None else out
                    out[name] = new
        return value if out is None else out
    if t == "array" and isinstance(value, list):
        items = [conform(schema["items"], v, names) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if t == "map" and isinstance(value, Mapping):
        vals = {k: conform(schema["values"], v, names) for k, v in value.items()}
        return value if all(vals[k] is value[k] for k in value) else vals
    if isinstance(t, (list, Mapping)):
        return conform(t, value, names)
    if isinstance(t, str) and t in names:
        return conform(names[t], value, names)
    return value


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "string", "bytes"})


def converts(schema: Any, seen: set[str] | None = None) -> bool:
    """Whether :func:`conform` can return anything but its value unchanged for ``schema``: True
    when a ``bytes`` or ``fixed`` type or a timestamp / date logical type is reachable, or a
    name is referenced that ``schema`` does not define (unknown, so assumed). A schema for which
    this is False needs no :func:`conform` pass (pure; ``schema`` as ``fastavro.parse_schema``
    returns it)."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        return any(converts(b, seen) for b in schema)
    if isinstance(schema, str):
        return schema == "bytes" or (schema not in _PRIMITIVES and schema not in seen)
    if not isinstance(schema, Mapping):
        return True
    logical = schema.get("logicalType")
    if logical in _INSTANTS or logical in _LOCAL or logical == "date":
        return True
    t = schema.get("type")
    if t in ("bytes", "fixed"):
        return True
    if t in ("record", "error", "enum"):
        seen.add(schema["name"])
        return t != "enum" and any(converts(f["type"], seen) for f in schema["fields"])
    if t == "array":
        return converts(schema["items"], seen)
    if t == "map":
        return converts(schema["values"], seen)
    return converts(t, seen)


def _latin1(text: str) -> Any:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text  # not a valid Avro JSON byte string: left for validation to name


def _fits(schema: Any, value: Any, names: dict[str, Any]) -> bool:
    """A cheap structural check: does ``value`` look like a value of branch ``schema``?"""
    schema = _named(schema, names)
    t = schema if isinstance(schema, str) else schema.get("type")
    if isinstance(t, str) and t in names and not isinstance(schema, Mapping):
        return _fits(names[t], value, names)
    if value is None:
        return t == "null"
    return {
        "boolean": lambda: isinstance(value, bool),
        "int": lambda: isinstance(value, int) and not isinstance(value, bool),
        "long": lambda: isinstance(value, (int, _dt.datetime)) and not isinstance(value, bool),
        "float": lambda: isinstance(value, (int, float)) and not isinstance(value, bool),
        "double": lambda: isinstance(value, (int, float)) and not isinstance(value, bool),
        "string": lambda: isinstance(value, str),
        "bytes": lambda: isinstance(value, (bytes, bytearray)),
        "fixed": lambda: isinstance(value, (bytes, bytearray)),
        "enum": lambda: isinstance(value, str),
        "record": lambda: isinstance(value, Mapping),
        "error": lambda: isinstance(value, Mapping),
        "array": lambda: isinstance(value, list),
        "map": lambda: isinstance(value, Mapping),
    }.get(t, lambda: False)()


def _conform_union(branches: list[Any], value: Any, names: dict[str, Any]) -> Any:
    for b in branches:
        if _fits(b, value, names):
            return conform(b, value, names)
    return conform(branches[0], value, names) if branches else value


def has_instants(schema: Any, seen: set[str] | None = None) -> bool:
    """True if ``schema`` holds a field of an instant logical type (a naive datetime could hide there)."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        return any(has_instants(b, seen) for b in schema)
    if not isinstance(schema, Mapping):
        return False
    if schema.get("logicalType") in _INSTANTS:
        return True
    t = schema.get("type")
    if t in ("record", "error"):
        if schema["name"] in seen:
            return False
        seen.add(schema["name"])
        return any(has_instants(f["type"], seen) for f in schema["fields"])
    if t == "array":
        return has_instants(schema["items"], seen)
    if t == "map":
        return has_instants(schema["values"], seen)
    return isinstance(t, (list, Mapping)) and has_instants(t, seen)


def naive_datetime(schema: Any, value: Any, path: str = "", names: dict[str, Any] | None = None) -> str | None:
    """Dotted path of the first naive ``datetime`` in an instant-typed field of ``value``, or None."""
    names = {} if names is None else names
    schema = _named(schema, names)
    if isinstance(schema, list):
        for b in schema:
            found = naive_datetime(b, value, path, names)
            if found:
                return found
        return None
    if isinstance(schema, str):
        return naive_datetime(names[schema], value, path, names) if schema in names else None
    if schema.get("logicalType") in _INSTANTS:
        if isinstance(value, _dt.datetime) and value.tzinfo is None:
            return path or "<value>"
        return None
    t = schema.get("type")
    if t in ("record", "error") and isinstance(value, Mapping):
        for f in schema["fields"]:
            if f["name"] in value:
                found = naive_datetime(f["type"], value[f["name"]], f"{path}.{f['name']}" if path else f["name"],
                                       names)
                if found:
                    return found
    elif t == "array" and isinstance(value, list):
        for i, v in enumerate(value):
            found = naive_datetime(schema["items"], v, f"{path}[{i}]", names)
            if found:
                return found
    elif t == "map" and isinstance(value, Mapping):
        for k, v in value.items():
            found = naive_datetime(schema["values"], v, f"{path}[{k!r}]", names)
            if found:
                return found
    elif isinstance(t, (list, Mapping)):
        return naive_datetime(t, value, path, names)
    return None
