"""The exception tree: every exception class defined in casestream derives from
``CasestreamError`` and is drawn, under its actual parent, in the docstring of
``casestream.errors``; a class defined outside ``errors.py`` is drawn with its module."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import casestream
import casestream.errors
from casestream.errors import CasestreamError

#: Exceptions that are not library errors, each with the reason.
NOT_LIBRARY_ERRORS = {
    "casestream.cli.main.ConfigurationError": "a click.ClickException: click prints it and "
                                              "exits with status 2 (the CLI's usage errors)",
}

_NODE = re.compile(r"^(?P<indent>(?:[│ ]   )*)[├└]── (?P<name>_?[A-Za-z]\w*)(?P<rest>.*)$")


def exception_classes() -> dict[str, type[BaseException]]:
    """``module.Qualname`` -> class, for every exception class defined in a casestream module
    (``__main__`` entry points are not imported)."""
    found: dict[str, type[BaseException]] = {}
    names = ["casestream", *(m.name for m in pkgutil.walk_packages(casestream.__path__, "casestream."))]
    for name in names:
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def drawn_tree(doc: str) -> dict[str, tuple[str | None, str]]:
    """name -> (parent name, rest of its line) from the drawing in ``doc``: the block after
    the first ``::``, indented by 4, its first line the root (parent None)."""
    lines = doc.split("::", 1)[1].strip("\n").split("\n\n", 1)[0].splitlines()
    root = lines[0].strip()
    tree: dict[str, tuple[str | None, str]] = {root: (None, "")}
    parents = [root]
    for line in lines[1:]:
        m = _NODE.match(line[4:])
        if m is None:
            continue  # a description's continuation line
        depth = len(m["indent"]) // 4 + 1
        del parents[depth:]
        tree[m["name"]] = (parents[-1], m["rest"])
        parents.append(m["name"])
    return tree


def problems(classes: dict[str, type[BaseException]], doc: str) -> list[str]:
    tree = drawn_tree(doc)
    bad = []
    for qualname, cls in sorted(classes.items()):
        if qualname in NOT_LIBRARY_ERRORS:
            continue
        if not issubclass(cls, CasestreamError):
            bad.append(f"{qualname} does not derive from CasestreamError")
            continue
        if cls.__name__ not in tree:
            bad.append(f"{qualname} is not drawn in the tree of casestream.errors")
            continue
        parent, rest = tree[cls.__name__]
        bases = [b.__name__ for b in cls.__bases__ if issubclass(b, CasestreamError)]
        if cls is not CasestreamError and parent not in bases:
            bad.append(f"{qualname} is drawn under {parent}, derives from {', '.join(bases)}")
        module = cls.__module__.removeprefix("casestream.")
        if cls.__module__ != "casestream.errors" and f"{module}:" not in rest:
            bad.append(f"{qualname} is drawn without its module ({module}:)")
    names = {cls.__name__ for cls in classes.values()}
    bad += [f"{name} is drawn but defined nowhere" for name in tree if name not in names]
    return bad


def test_there_are_classes_and_a_tree_to_check() -> None:
    classes = exception_classes()
    assert {"casestream.errors.PoisonMessageError", "casestream.events.catalog.CatalogError",
            "casestream.consumer.inbox.GuardConflict"} <= classes.keys()
    tree = drawn_tree(casestream.errors.__doc__ or "")
    assert tree["CasestreamError"][0] is None
    assert tree["GuardConflict"][0] == "RetryableError"
    assert tree["PoisonMessageError"][0] == "HandlerError"


def test_every_exception_derives_from_the_root_and_is_drawn_where_it_belongs() -> None:
    bad = problems(exception_classes(), casestream.errors.__doc__ or "")
    assert not bad, "\n".join(bad)


def test_the_exempt_list_names_existing_classes() -> None:
    classes = exception_classes()
    assert all(name in classes for name in NOT_LIBRARY_ERRORS)


def test_a_stray_exception_is_reported() -> None:
    class Stray(RuntimeError):
        pass

    class Undrawn(CasestreamError):
        pass

    Stray.__module__ = Undrawn.__module__ = "casestream.consumer.batch"
    classes = {**exception_classes(), "x.Stray": Stray, "x.Undrawn": Undrawn}
    bad = problems(classes, casestream.errors.__doc__ or "")
    assert bad == ["x.Stray does not derive from CasestreamError",
                   "x.Undrawn is not drawn in the tree of casestream.errors"]


def test_a_class_drawn_under_the_wrong_parent_is_reported() -> None:
    doc = (casestream.errors.__doc__ or "").replace(
        "    │   │   └── GuardConflict       consumer.inbox:",
        "    │   └── GuardConflict           consumer.inbox:")
    assert "GuardConflict is drawn under HandlerError, derives from RetryableError" in "\n".join(
        problems(exception_classes(), doc))
