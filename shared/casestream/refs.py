"""``"package.module:attr"`` references: how configuration files and specs name code.

Pure (stdlib ``importlib``). Used by the catalog (``[catalog] upcasters``) and the
service spec (``settings``, ``build``); at the root so that ``events`` and ``service`` share
it without importing each other.
"""

from __future__ import annotations

import importlib
from typing import Any

from casestream.errors import ConfigError

__all__ = ["resolve"]


def resolve(ref: str) -> Any:
    """The object named by ``"package.module:attr"`` (``attr`` may be dotted).

    Raises:
        ConfigError: ``ref`` is not ``module:attr``, the module does not import, or it has
            no such attribute (the message names ``ref``).
    """
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{ref!r} is not a 'module:attribute' reference")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{ref}: module {module_name} does not import: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{ref}: {module_name} has no attribute {attr}") from None
    return obj
