"""Single-schema rules on the JSON form of an Avro schema (before any parser sees it).

Pure. Rules (ids in ``schemacheck.rules``): ``name-not-qualified``, ``enum-default-not-symbol``,
``union-default-not-first-branch``, ``invalid-default``. Running these first turns mistakes
that parsers accept silently (a union default matching a later branch; both fastavro and
Apache avro accept it, registries reject it) or reject with a bare parse error (enum default
not a symbol) into findings with a field path and a fix.

Default-value rules follow the Avro 1.12 specification, "Complex Types: Records" (table of
JSON encodings of defaults) and "Unions" (a union default corresponds to the first schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Issue", "lint_schema"]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_NAMED = {"record", "error", "enum", "fixed"}
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Issue:
    """A problem at ``path`` (dotted field path) found by ``rule``."""

    rule: str
    path: str
    message: str


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Linter:
    def __init__(self, require_namespace: bool):
        self.require_namespace = require_namespace
        self.named: dict[str, Any] = {}
        self.issues: list[Issue] = []

    def full_name(self, name: str, ns: str | None) -> str:
        return name if "." in name or not ns else f"{ns}.{name}"

    def walk(self, schema: Any, ns: str | None, path: str) -> None:
        if isinstance(schema, str):
            # an unqualified reference to a type defined in this file; unknown names are the parsers' job
            if schema not in _PRIMITIVES and "." not in schema and self.full_name(schema, ns) in self.named:
                self.issues.append(
                    Issue(
                        "name-not-qualified",
                        path,
                        f"type reference {schema!r} is not a full name (write {self.full_name(schema, ns)!r})",
                    )
                )
            return
        if isinstance(schema, list):
            for branch in schema:
                self.walk(branch, ns, path)
            return
        if not isinstance(schema, Mapping):
            return
        t = schema.get("type")
        if t in _NAMED:
            name = str(schema.get("name", ""))
            if "." in name:
                inner_ns: str | None = name.rpartition(".")[0]
            elif isinstance(schema.get("namespace"), str) and schema["namespace"]:
                inner_ns = schema["namespace"]
            else:
                inner_ns = ns
            if not inner_ns and self.require_namespace:
                self.issues.append(Issue("name-not-qualified", path, f"{t} {name!r} has no namespace"))
            full = self.full_name(name, inner_ns)
            self.named[full] = schema
            if t in ("record", "error"):
                for f in schema.get("fields") or []:
                    if not isinstance(f, Mapping):
                        continue
                    fpath = _join(path, str(f.get("name")))
                    self.walk(f.get("type"), inner_ns, fpath)
                    if "default" in f:
                        self.check_default(f.get("type"), f["default"], inner_ns, fpath)
            elif t == "enum":
                default = schema.get("default", _MISSING)
                if default is not _MISSING and default not in (schema.get("symbols") or []):
                    self.issues.append(
                        Issue(
                            "enum-default-not-symbol",
                            path,
                            f"enum {full} default {default!r} is not one of its symbols {schema.get('symbols')}",
                        )
                    )
            return
        if t == "array":
            self.walk(schema.get("items"), ns, path)
        elif t == "map":
            self.walk(schema.get("values"), ns, path)
        elif isinstance(t, (list, Mapping)) or (isinstance(t, str) and t not in _PRIMITIVES):
            self.walk(t, ns, path)

    def resolve(self, schema: Any, ns: str | None) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return self.named.get(self.full_name(schema, ns), schema)
        if isinstance(schema, Mapping) and not isinstance(schema.get("type"), str):
            return self.resolve(schema.get("type"), ns)
        if isinstance(schema, Mapping) and schema.get("type") not in _PRIMITIVES | _NAMED | {"array", "map"}:
            return self.resolve(schema.get("type"), ns)
        return schema

    def fits(self, schema: Any, value: Any, ns: str | None) -> bool:
        """Whether ``value`` is a valid JSON default for ``schema`` (spec table, Complex Types: Records)."""
        s = self.resolve(schema, ns)
        if isinstance(s, list):
            return any(self.fits(b, value, ns) for b in s)
        t = s if isinstance(s, str) else s.get("type") if isinstance(s, Mapping) else None
        if t == "null":
            return value is None
        if t == "boolean":
            return isinstance(value, bool)
        if t == "int":
            return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
        if t == "long":
            return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
        if t in ("float", "double"):
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if t == "string":
            return isinstance(value, str)
        if t == "bytes":  # spec table: a string whose code points 0-255 are the bytes
            return isinstance(value, str) and all(ord(c) < 256 for c in value)
        if t == "fixed":
            return isinstance(value, str) and len(value) == s.get("size") and all(ord(c) < 256 for c in value)
        if t == "enum":
            return isinstance(value, str) and value in (s.get("symbols") or [])
        if t == "array":
            return isinstance(value, list) and all(self.fits(s.get("items"), v, ns) for v in value)
        if t == "map":
            return isinstance(value, Mapping) and all(self.fits(s.get("values"), v, ns) for v in value.values())
        if t in ("record", "error"):
            if not isinstance(value, Mapping):
                return False
            inner_ns = s["name"].rpartition(".")[0] if "." in s.get("name", "") else s.get("namespace", ns)
            for f in s.get("fields") or []:
                if f.get("name") in value:
                    if not self.fits(f.get("type"), value[f["name"]], inner_ns):
                        return False
                elif "default" not in f:
                    return False
            return True
        return True  # unresolvable reference: the parsers report it

    def check_default(self, schema: Any, value: Any, ns: str | None, path: str) -> None:
        s = self.resolve(schema, ns)
        if isinstance(s, list) and s:
            if self.fits(s[0], value, ns):
                return
            if any(self.fits(b, value, ns) for b in s[1:]):
                first = s[0] if isinstance(s[0], str) else s[0].get("type", "?") if isinstance(s[0], Mapping) else "?"
                self.issues.append(
                    Issue(
                        "union-default-not-first-branch",
                        path,
                        f"default {value!r} does not match the union's first branch ({first})",
                    )
                )
                return
        elif isinstance(s, Mapping) and s.get("type") == "enum" and isinstance(value, str):
            if value not in (s.get("symbols") or []):
                self.issues.append(
                    Issue("enum-default-not-symbol", path, f"field default {value!r} is not a symbol of {s.get('name')}")
                )
            return
        elif self.fits(s, value, ns):
            return
        self.issues.append(Issue("invalid-default", path, f"default {value!r} does not match the field's type"))


def lint_schema(schema: Any, *, path: str = "", require_namespace: bool = True) -> list[Issue]:
    """Run the single-schema rules on a schema in JSON form.

    Args:
        schema: the parsed JSON (dict) of an ``.avsc`` file.
        path: prefix for field paths (``payload`` for payload files).
        require_namespace: the top-level named type must declare a namespace (or a dotted name).

    Returns:
        Issues in document order (empty when clean).
    """
    linter = _Linter(require_namespace)
    linter.walk(schema, None, path)
    return linter.issues
