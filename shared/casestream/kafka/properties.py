"""Client properties from the environment and from files, without pydantic: what the
settings (``casestream.service.settings``) and the pydantic-free ``casestream schemas``
commands both read.

* ``CASESTREAM_KAFKA_PROP_<NAME>=value`` sets librdkafka property ``<name>`` (lower-cased,
  ``_`` read as ``.``: ``CASESTREAM_KAFKA_PROP_SASL_MECHANISM`` -> ``sasl.mechanism``;
  librdkafka's CONFIGURATION.md lists them); ``CASESTREAM_KAFKA_PROP_<NAME>_FILE=/path``
  sets it to that file's content (one trailing newline removed), so a secret never sits in
  the environment.
* ``CASESTREAM_KAFKA_PROPERTIES_FILE=/path``: a Java-style properties file of them, beneath
  the variables.
* ``CASESTREAM_REGISTRY_PROP_<NAME>`` / ``CASESTREAM_REGISTRY_PROPERTIES_FILE``: the same for
  ``confluent_kafka.schema_registry.SchemaRegistryClient`` (``basic.auth.user.info``,
  ``bearer.auth.token``, ``ssl.ca.location``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from casestream.errors import ConfigError

__all__ = ["PROPERTY_PREFIXES", "environ_properties", "properties_from_environ", "property_variable",
           "read_properties_file", "read_secret_file"]

#: client kind (settings field ``<kind>_properties``) -> prefix of the variables that fill it
PROPERTY_PREFIXES: Mapping[str, str] = {
    "kafka": "CASESTREAM_KAFKA_PROP_",
    "registry": "CASESTREAM_REGISTRY_PROP_",
}

_FILE_SUFFIX = "_FILE"


def property_variable(prefix: str, name: str) -> str:
    """The variable setting property ``name``: ``("CASESTREAM_KAFKA_PROP_", "sasl.mechanism")``
    -> ``CASESTREAM_KAFKA_PROP_SASL_MECHANISM``."""
    return prefix + name.upper().replace(".", "_")


def read_secret_file(variable: str, path: str) -> str:
    """The content of secret file ``path`` (named by ``variable``), one trailing newline off.

    Raises:
        ConfigError: the file cannot be read or is empty (names the variable, never the value).
    """
    try:
        value = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{variable}={path}: cannot read: {e.strerror or e}") from None
    value = value[:-1] if value.endswith("\n") else value
    value = value[:-1] if value.endswith("\r") else value
    if not value:
        raise ConfigError(f"{variable}={path}: the file is empty")
    return value


def properties_from_environ(prefix: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The properties named by ``<prefix><NAME>`` variables of ``environ`` (``<NAME>_FILE``:
    the value is that file's content). A property given both ways is refused.

    Raises:
        ConfigError: a variable with an empty name, an unreadable secret file, or a property
            set by both ``<NAME>`` and ``<NAME>_FILE``.
    """
    out: dict[str, str] = {}
    origin: dict[str, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(prefix):
            continue
        rest = variable[len(prefix):]
        from_file = rest.endswith(_FILE_SUFFIX)
        if from_file:
            rest = rest[: -len(_FILE_SUFFIX)]
        name = rest.lower().replace("_", ".").strip(".")
        if not name:
            raise ConfigError(f"{variable}: no property name after {prefix}")
        if name in out:
            raise ConfigError(f"{variable} and {origin[name]} both set property {name}: keep one")
        out[name] = read_secret_file(variable, environ[variable]) if from_file else environ[variable]
        origin[name] = variable
    return out


def read_properties_file(path: Path, *, variable: str) -> dict[str, str]:
    """The ``key=value`` lines of a Java-style properties file (the format of Kafka's own
    ``client.properties``): ``#`` and ``!`` start a comment line, ``key: value`` and
    ``key = value`` are accepted, surrounding blanks are stripped; no line continuations or
    escapes (a value is taken literally).

    Args:
        path: the file, e.g. a mounted Kubernetes Secret.
        variable: the setting that named it, for messages (``CASESTREAM_KAFKA_PROPERTIES_FILE``).

    Raises:
        ConfigError: the file cannot be read, or a line has no ``=``/``:`` or an empty key
            (names the file and the line number, never the value).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{variable}={path}: cannot read: {e.strerror or e}") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key = line[:cut].strip() if cut >= 0 else ""
        if not key:
            raise ConfigError(f"{variable}={path} line {number}: not a key=value line")
        out[key] = line[cut + 1:].strip()
    return out


def environ_properties(kind: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The ``kind`` (``"kafka"`` or ``"registry"``) client properties ``environ`` names: the
    ``CASESTREAM_<KIND>_PROPERTIES_FILE`` file, then the ``CASESTREAM_<KIND>_PROP_*``
    variables over it. For callers without settings (``casestream schemas register``).

    Raises:
        ConfigError: see :func:`read_properties_file` and :func:`properties_from_environ`.
    """
    variable = f"CASESTREAM_{kind.upper()}_PROPERTIES_FILE"
    file = environ.get(variable)
    base = read_properties_file(Path(file), variable=variable) if file else {}
    return {**base, **properties_from_environ(PROPERTY_PREFIXES[kind], environ)}
