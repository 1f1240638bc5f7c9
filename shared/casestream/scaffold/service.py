"""The service skeleton: names derived from a service name, and the files written from the
templates (see the package docstring)."""

from __future__ import annotations

import keyword
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from casestream.errors import ConfigError
from casestream.service import ServiceSpec

__all__ = ["TEMPLATE_SUFFIX", "ServiceScaffold", "service_scaffold", "write_service"]

#: The suffix of every template file (dropped in the written file's name).
TEMPLATE_SUFFIX = ".tmpl"

_PACKAGE = re.compile(r"^[a-z_][a-z0-9_]*$")
# Avro namespace: dot-separated names (Avro specification, "Names").
_NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: Packages a skeleton must not shadow: the platform's and the regulator suite's.
_TAKEN = frozenset({"casestream", "services", "tests", "schemas"})
#: Default HTTP ports are spread over this range by the service name (the suite's and the
#: example's sit below it).
_PORTS = (18200, 18900)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceScaffold:
    """The names of one skeleton.

    Attributes:
        name: the service name (as :class:`casestream.service.ServiceSpec` requires).
        package: its Python package; dist: its distribution name (``name`` with ``-``).
        namespace: the Avro namespace of its subjects.
        event: its first event type (``<Name>Created``); settings_class: ``<Name>Settings``.
        env_prefix: ``CASESTREAM_<NAME>_``; port: its default HTTP port.
    """

    name: str
    package: str
    namespace: str
    dist: str
    event: str
    settings_class: str
    env_prefix: str
    port: int

    def variables(self) -> dict[str, str]:
        """The template placeholders and their values."""
        return {"name": self.name, "package": self.package, "namespace": self.namespace,
                "dist": self.dist, "event": self.event, "settings_class": self.settings_class,
                "env_prefix": self.env_prefix, "port": str(self.port)}


def service_scaffold(name: str, *, package: str | None = None,
                     namespace: str | None = None) -> ServiceScaffold:
    """The skeleton names for service ``name`` (``package`` and ``namespace`` default to it).

    Raises:
        ConfigError: one line naming what is wrong: the service name (the
            :class:`~casestream.service.ServiceSpec` rule), the package (a lowercase Python
            identifier, not a keyword, not a standard-library module, not ``casestream`` or
            ``services``) or the namespace (dot-separated Avro names).
    """
    package = name if package is None else package
    namespace = package if namespace is None else namespace
    ServiceSpec(name=name, module=package, settings="m:a", build="m:a")  # the name rule
    if (not _PACKAGE.fullmatch(package) or keyword.iskeyword(package)
            or package in _TAKEN or package in sys.stdlib_module_names):
        raise ConfigError(f"package {package!r}: a lowercase Python identifier (letters, digits "
                          f"and _), not a keyword, a standard-library module or one of "
                          f"{', '.join(sorted(_TAKEN))}")
    if not _NAMESPACE.fullmatch(namespace):
        raise ConfigError(f"namespace {namespace!r}: dot-separated names of letters, digits "
                          f"and _ (an Avro namespace)")
    title = "".join(part.capitalize() for part in name.split("_"))
    low, high = _PORTS
    return ServiceScaffold(
        name=name, package=package, namespace=namespace, dist=name.replace("_", "-"),
        event=f"{title}Created", settings_class=f"{title}Settings",
        env_prefix=f"CASESTREAM_{name.upper()}_",
        port=low + zlib.crc32(name.encode()) % (high - low))


def _templates(folder: Traversable, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Traversable]]:
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            if entry.name != "__pycache__":
                yield from _templates(entry, (*prefix, entry.name))
        elif entry.name.endswith(TEMPLATE_SUFFIX):
            yield (*prefix, entry.name), entry


def _path_of(parts: tuple[str, ...], scaffold: ServiceScaffold) -> Path:
    tokens = {"__package__": scaffold.package, "__name__": scaffold.name,
              "__event__": scaffold.event}
    out = []
    for part in parts:
        for token, value in tokens.items():
            part = part.replace(token, value)
        out.append(part.removesuffix(TEMPLATE_SUFFIX))
    return Path(*out)


def write_service(scaffold: ServiceScaffold, target: Path, *, force: bool = False) -> list[Path]:
    """Write the skeleton into ``target`` (created if missing); returns the files written,
    relative to ``target``, in order.

    Raises:
        ConfigError: ``target`` is a file, or a folder that is not empty (unless ``force``:
            then the skeleton's files are overwritten and other files left alone).
    """
    if target.exists() and not target.is_dir():
        raise ConfigError(f"target {target} is a file, not a folder")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ConfigError(f"target {target} is not empty (pass --force to write into it)")
    root = files("casestream.scaffold").joinpath("templates", "service")
    variables = scaffold.variables()
    rendered = []
    for parts, template in _templates(root):
        rel = _path_of(parts, scaffold)
        try:
            text = Template(template.read_text(encoding="utf-8")).substitute(variables)
        except (KeyError, ValueError) as e:  # a template defect, not the user's input
            raise ConfigError(f"template {'/'.join(parts)}: bad placeholder {e}") from None
        rendered.append((rel, text))
    for rel, text in rendered:
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return [rel for rel, _ in rendered]
