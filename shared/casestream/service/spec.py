"""What a service declares to the platform: :class:`ServiceSpec`.

A service package exports one ``ServiceSpec`` and registers it under the entry point group
``casestream.services`` (``pyproject.toml``)::

    [project.entry-points."casestream.services"]
    orders = "orders:SERVICE"

The platform's commands (``casestream status``, ``casestream outbox``, ``casestream dlq``,
``make run``) find services only this way; the library holds no list of them. A spec is
cheap to import: its ``build`` and ``settings`` are ``"module:attr"`` strings resolved on
first use, so listing services loads no service code.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from casestream.errors import ConfigError
from casestream.kafka.topicplan import TopicSpec
from casestream.refs import resolve

__all__ = ["ServiceSpec", "TopicSpec", "resolve"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSpec:
    """A service as the platform sees it.

    Attributes:
        name: lowercase service name (``[a-z][a-z0-9_]*``, at most 31 characters), e.g.
            ``"billing"``: its settings read ``CASESTREAM_<NAME>_*`` variables, its processes and
            relay are named after it.
        module: the package run as ``python -m <module>`` (its ``__main__`` calls
            ``run_service``).
        settings: ``"module:Class"`` of its :class:`~casestream.service.ServiceSettings`
            subclass (gives ``port`` and ``dsn``).
        build: ``"module:function"``: ``build(settings | None) -> ServiceProcess``.
        consumers: its consumer names (= Kafka group ids; dead letters on ``<name>.dlq``),
            in the order ``casestream status`` shows them, projections' live consumers
            included. Its builder refuses, at ``build()``, a consumer not listed here and
            (when it runs any consumer) one listed but never declared.
        projections: the names of the projections it maintains (``ProjectionSpec.name``,
            e.g. ``"billing.ledger"``); its builder refuses a projection not listed here.
        outbox: True if its database has an outbox table (it emits events).
        description: one line for listings.
        migrations: its migrations folder, relative to the folder of package ``module``
            (default ``migrations``): what ``casestream migrate`` applies, as its builder
            does at start (``ServiceBuilder.start()``), with the outbox DDL first
            when ``outbox``.
        topics: the topics this service owns (:class:`TopicSpec`: partitions, replication
            factor, retention, cleanup policy, ``min.insync.replicas``), typically the
            ``outbox.event.<aggregate type>`` topics its relay writes. ``casestream topics
            plan|apply`` and the dev stack create and configure them; a topic is owned by one
            service (declared by two: refused). Dead-letter and re-drive topics are not
            declared: each consumer creates its own at start.
        subscriptions: consumer name -> the topics it reads, for each of ``consumers``
            (``{"billing.ledger": ("outbox.event.order",)}``): what the event catalog
            (``casestream catalog asyncapi``, the console's catalog pages) shows without starting
            the service. The builder refuses a consumer whose topics differ from its entry here.

    Raises:
        ConfigError: on construction, a bad ``name``, ``module`` or reference.
    """

    name: str
    module: str
    settings: str
    build: str
    consumers: tuple[str, ...] = ()
    projections: tuple[str, ...] = ()
    outbox: bool = True
    description: str = ""
    migrations: str = "migrations"
    topics: tuple[TopicSpec, ...] = ()
    subscriptions: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(f"service name {self.name!r}: lowercase letters, digits and _, "
                              "starting with a letter, at most 31 characters")
        for field, ref in (("settings", self.settings), ("build", self.build)):
            if ref.count(":") != 1:
                raise ConfigError(f"service {self.name}: {field}={ref!r} is not 'module:attribute'")
        if not isinstance(self.consumers, tuple):
            object.__setattr__(self, "consumers", tuple(self.consumers))
        if isinstance(self.projections, str):
            raise ConfigError(f"service {self.name}: projections must be a tuple of names, not a string")
        object.__setattr__(self, "projections", tuple(self.projections))
        object.__setattr__(self, "topics", tuple(self.topics))
        names = set()
        for topic in self.topics:
            if not isinstance(topic, TopicSpec):
                raise ConfigError(f"service {self.name}: topics holds {topic!r}, not a TopicSpec")
            if topic.name in names:
                raise ConfigError(f"service {self.name}: topic {topic.name} is declared twice")
            names.add(topic.name)
        reads = {str(c): ((t,) if isinstance(t, str) else tuple(t))
                 for c, t in dict(self.subscriptions).items()}
        for consumer, topics in reads.items():
            if consumer not in self.consumers:
                raise ConfigError(f"service {self.name}: subscriptions names {consumer!r}, not one of "
                                  f"its consumers ({', '.join(self.consumers) or 'none'})")
            if not topics or any(not isinstance(t, str) or not t for t in topics):
                raise ConfigError(f"service {self.name}: subscriptions[{consumer!r}] must be a "
                                  f"non-empty tuple of topic names")
        object.__setattr__(self, "subscriptions", reads)

    def settings_class(self) -> type[Any]:
        """The service's settings class (imports its module)."""
        return resolve(self.settings)  # type: ignore[no-any-return]

    def read_settings(self) -> Any:
        """The service's settings read from the environment.

        Raises:
            ConfigError: a variable is invalid (the message names it).
        """
        from casestream.service.settings import read_settings  # settings need pydantic

        return read_settings(self.settings_class(), self.name)

    def port(self, env: Mapping[str, str] | None = None) -> int:
        """The service's HTTP port under ``env`` (default: this process's environment):
        ``CASESTREAM_<NAME>_PORT`` if set, else the default of its settings' ``port`` field.
        Reads no other variable, so a caller can pass the environment of a child process.

        Raises:
            ConfigError: the variable is not a port number (1-65535), or the settings class
                declares no ``port`` default.
        """
        env = os.environ if env is None else env
        var = f"CASESTREAM_{self.name.upper()}_PORT"
        raw: Any = env.get(var)
        if raw is None:
            fields = getattr(self.settings_class(), "model_fields", {})
            raw = getattr(fields.get("port"), "default", None)
            if not isinstance(raw, int):
                raise ConfigError(f"service {self.name}: {self.settings} declares no default "
                                  f"port; set {var}")
        try:
            port = int(raw)
        except ValueError:
            port = 0
        if not 1 <= port <= 65535:
            raise ConfigError(f"{var}={raw!r}: not a port number (1-65535)")
        return port

    def migrations_folder(self) -> Any:
        """The ``pathlib.Path`` of its migrations folder (imports nothing but finds ``module``).

        Raises:
            ConfigError: ``module`` is not an installed package.
        """
        import importlib.util
        from pathlib import Path

        found = importlib.util.find_spec(self.module)
        locations = list(found.submodule_search_locations or []) if found is not None else []
        if not locations:
            raise ConfigError(f"service {self.name}: module {self.module!r} is not an installed package")
        return Path(locations[0]) / self.migrations

    def builder(self) -> Any:
        """The service's ``build`` function (imports its bootstrap module)."""
        return resolve(self.build)
