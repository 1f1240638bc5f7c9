"""Find what installed packages contribute to the platform, through entry points.

Groups (``[project.entry-points."<group>"]`` in a package's ``pyproject.toml``):

    casestream.services     name = "module:SERVICE"       a :class:`ServiceSpec`
    casestream.projections  name = "module:PROJECTION"    a rebuildable ``ProjectionSpec``
    casestream.commands     name = "module:click_command" a ``casestream <name>`` command group
    casestream.schemas      name = "module:function"      a schemas folder (function -> Path)

A service reads another team's events through that team's registered schemas folder
(:func:`schema_folder`), never by importing the team's package.

Nothing is imported until asked for: ``projection_refs()`` and ``command_refs()`` give the
references, ``services()`` loads the (light) spec objects. Entry points are read from the
installed distributions' metadata (``importlib.metadata``), so a package is discovered once
it is installed (``pip install -e .`` for a checkout).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path

from casestream.errors import ConfigError
from casestream.refs import resolve
from casestream.service.spec import ServiceSpec

__all__ = ["SERVICES_GROUP", "PROJECTIONS_GROUP", "COMMANDS_GROUP", "services",
           "SCHEMAS_GROUP", "projection_refs", "command_refs", "schema_folders", "schema_folder",
           "schema_folder_refs", "catalog_folders"]

SERVICES_GROUP = "casestream.services"
PROJECTIONS_GROUP = "casestream.projections"
COMMANDS_GROUP = "casestream.commands"


def _refs(group: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name] != ep.value:
            raise ConfigError(f"entry point {group} {ep.name!r} is registered twice: "
                              f"{found[ep.name]} and {ep.value}")
        found[ep.name] = ep.value
    return dict(sorted(found.items()))


def projection_refs() -> dict[str, str]:
    """Projection name -> ``"module:attr"`` of its ProjectionSpec, sorted by name."""
    return _refs(PROJECTIONS_GROUP)


def command_refs() -> dict[str, str]:
    """Command name -> ``"module:attr"`` of its click command, sorted by name."""
    return _refs(COMMANDS_GROUP)


def services(refs: Mapping[str, str] | None = None) -> dict[str, ServiceSpec]:
    """Service name -> its :class:`ServiceSpec`, sorted by name (``refs``: name -> reference,
    default the installed ``casestream.services`` entry points).

    Raises:
        ConfigError: a reference does not resolve to a ServiceSpec, or its ``name`` differs
            from the entry point's.
    """
    from casestream.service.spec import resolve

    out: dict[str, ServiceSpec] = {}
    for name, ref in (_refs(SERVICES_GROUP) if refs is None else dict(refs)).items():
        spec = resolve(ref)
        if not isinstance(spec, ServiceSpec):
            raise ConfigError(f"entry point {SERVICES_GROUP} {name} = {ref}: "
                              f"not a ServiceSpec ({type(spec).__name__})")
        if spec.name != name:
            raise ConfigError(f"entry point {SERVICES_GROUP} {name} = {ref}: "
                              f"the spec is named {spec.name!r}")
        out[name] = spec
    return dict(sorted(out.items()))


SCHEMAS_GROUP = "casestream.schemas"


def schema_folder_refs() -> dict[str, str]:
    """Schemas folder name -> ``"module:function"`` (group ``casestream.schemas``), sorted by name."""
    return _refs(SCHEMAS_GROUP)


def _folder(name: str, ref: str) -> Path:
    try:
        return Path(resolve(ref)())
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a team's function may fail in any way: one line
        raise ConfigError(f"entry point {SCHEMAS_GROUP} {name} = {ref}: {type(e).__name__}: {e}") from e


def schema_folders() -> list[Path]:
    """The schemas folders installed packages register (group ``casestream.schemas``,
    ``name = "module:function"``, the function returning the folder's ``Path``), by name.

    Raises:
        ConfigError: a reference does not resolve.
    """
    return [_folder(name, ref) for name, ref in schema_folder_refs().items()]


def schema_folder(name: str) -> Path:
    """The schemas folder an installed package registers as ``name`` (group
    ``casestream.schemas``): how a service gets another team's catalog, e.g. the regulator
    suite's ``schema_folder("suite")``, without importing that team's package.

    Raises:
        ConfigError: no installed package registers ``name`` (the message names the installed
            folders and how to register one), or its reference does not resolve.
    """
    refs = schema_folder_refs()
    ref = refs.get(name)
    if ref is None:
        installed = ", ".join(refs) or "none"
        raise ConfigError(f"no installed package registers the schemas folder {name!r} (entry "
                          f"point group {SCHEMAS_GROUP}; installed: {installed}): install the "
                          f"package of the team that publishes those events")
    return _folder(name, ref)


def catalog_folders(cwd: Path | None = None) -> list[Path]:
    """The folders a command loads its catalog from: ``./schemas`` of ``cwd`` (default the
    current directory: a team's repository) when it holds a ``catalog.toml``, else
    :func:`schema_folders`.

    Raises:
        ConfigError: neither exists (the message names both places).
    """
    local = (cwd or Path.cwd()) / "schemas"
    if (local / "catalog.toml").is_file():
        return [local]
    found = schema_folders()
    if not found:
        raise ConfigError(f"no schemas folder: {local} has no catalog.toml and no installed "
                          f"package registers one (entry point group {SCHEMAS_GROUP})")
    return found
