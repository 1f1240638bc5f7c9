"""Lazy re-exports for package ``__init__`` modules (PEP 562 module ``__getattr__``).

A package whose public names live in modules that import drivers (confluent_kafka, psycopg,
starlette) re-exports them lazily, so importing the package stays cheap::

    _LAZY = {"OutboxRelay": "casestream.outbox.relay"}
    __getattr__ = lazy_exports(__name__, _LAZY, globals())
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str],
                 namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` -> ``getattr(import(table[name]), name)``,
    or the module itself when ``table[name]`` is ``<package>.<name>``; the value is cached in
    ``namespace`` (the package's ``globals()``), so each name is resolved once.

    Raises (from the returned function):
        AttributeError: ``name`` is not in ``table``.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if module == f"{package}.{name}" else getattr(imported, name)
        namespace[name] = value
        return value

    return __getattr__


def moved_exports(package: str, moved: Mapping[str, str], fallback: Callable[[str], Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` whose names in ``moved`` (name -> new package)
    still resolve, with a ``DeprecationWarning`` naming where to import them from; any other
    name goes to ``fallback`` (e.g. a :func:`lazy_exports` function)."""

    def __getattr__(name: str) -> Any:
        new = moved.get(name)
        if new is None:
            return fallback(name)
        warnings.warn(f"{package}.{name} moved: import it from {new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
