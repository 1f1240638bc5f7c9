"""Strict JSON for request bodies: what ``json.loads`` lets through and a service must not.

:func:`parse_json` reads a body as RFC 8259 JSON and refuses, with an :class:`HttpProblem`
400 that names the problem and where it is:

- bytes that are not UTF-8 (RFC 8259 §8.1), a syntax error, ``NaN``/``Infinity``, a number
  too large for a float, an integer of more than 4300 digits -> ``malformed_json``;
- an object with the same key twice (RFC 8259 §4 leaves it undefined; ``json.loads`` keeps
  the last, so ``{"severity": 9, "severity": 1}`` would pass validation as 1) ->
  ``duplicate_json_key``;
- nesting deeper than ``max_depth`` arrays/objects -> ``json_too_deep``;
- a string (value or key) holding U+0000 or a lone surrogate (U+D800..U+DFFF, which
  ``json.loads`` decodes from ``\\ud800`` but which no UTF-8 text can hold, so it fails
  later in the database or the encoder) -> ``invalid_unicode``.

Field paths are dotted, as in validation errors: ``reason``, ``items.0.name``; ``body``
for the whole document.
"""

from __future__ import annotations

import json
import math
from typing import Any

from casestream.http.problem import HttpProblem

DEFAULT_MAX_DEPTH = 32
"""Arrays/objects inside each other a body may nest (the top-level value is depth 1)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # raised through json.loads unchanged
            shown = _shown(key)
            raise HttpProblem(400, "duplicate_json_key", "Duplicate JSON key",
                              f"body has the key {shown} more than once in one object",
                              errors=({"field": "body", "message": f"duplicate key {shown}"},))
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _malformed(message: str) -> HttpProblem:
    return HttpProblem(400, "malformed_json", "Malformed JSON body",
                       f"body is not valid JSON: {message}",
                       errors=({"field": "body", "message": message},))


def parse_json(raw: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON value of ``raw`` (see module docstring for what is refused).

    Raises:
        HttpProblem: 400 ``malformed_json`` / ``duplicate_json_key`` / ``json_too_deep`` /
            ``invalid_unicode``, naming the field or position.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _malformed(f"invalid UTF-8 byte at offset {e.start}") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant,
                           parse_float=_finite)
    except RecursionError:
        raise _too_deep("body", max_depth) from None
    except json.JSONDecodeError as e:
        raise _malformed(f"{e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise _malformed(str(e)[:200]) from None
    check_value(value, max_depth=max_depth)
    return value


def _too_deep(field: str, max_depth: int) -> HttpProblem:
    return HttpProblem(400, "json_too_deep", "JSON nested too deeply",
                       f"body nests arrays/objects more than {max_depth} deep",
                       errors=({"field": field, "message": f"nested deeper than {max_depth}"},))


def _bad_char(text: str) -> str | None:
    for ch in text:
        code = ord(ch)
        if code == 0:
            return "U+0000 (NUL)"
        if 0xD800 <= code <= 0xDFFF:
            return f"a lone surrogate U+{code:04X}"
    return None


def _shown(key: str) -> str:
    return json.dumps(key[:64], ensure_ascii=True)


def check_value(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Check a decoded JSON value's depth and strings (module docstring), iteratively.

    Raises:
        HttpProblem: 400 ``json_too_deep`` or ``invalid_unicode`` naming the field.
    """
    stack: list[tuple[Any, tuple[str, ...], int]] = [(value, (), 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > max_depth:
            raise _too_deep(_dotted(path), max_depth)
        if isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, (*path, key), what="key")
                stack.append((child, (*path, key), depth + 1))
        else:
            for i, child in enumerate(item):
                stack.append((child, (*path, str(i)), depth + 1))


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "body"


def _check_text(text: str, path: tuple[str, ...], *, what: str = "string") -> None:
    if text.isascii() and "\x00" not in text:
        return
    bad = _bad_char(text)
    if bad is not None:
        field = _dotted(path) if what == "string" else _dotted(path[:-1]) or "body"
        shown = field if what == "string" else f"key {_shown(path[-1])} of {field}"
        raise HttpProblem(400, "invalid_unicode", "Invalid Unicode in JSON body",
                          f"{shown}: a JSON {what} must not contain {bad}",
                          errors=({"field": field, "message": f"contains {bad}"},))
