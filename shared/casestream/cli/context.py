"""The one context every ``casestream`` command works from: :class:`CliContext`.

The ``casestream`` group puts one ``CliContext`` in ``ctx.obj``; commands reach it with
:func:`cli_context` (which also makes one when a command is invoked on its own, as tests
do). It reads :class:`~casestream.service.settings.CommonSettings` (``CASESTREAM_*``) on first
use, opens at most one codec per process, and gives the discovered services
(:func:`casestream.service.discovery.services`); nothing is loaded before a command asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click

__all__ = ["CliContext", "cli_context", "ServiceName"]


@dataclass(slots=True, kw_only=True)
class CliContext:
    """Settings, endpoints, codec and services shared by the commands of one invocation.

    Attributes:
        bootstrap: Kafka bootstrap servers given on the command line (``None``: settings).
        registry: schema registry URL given on the command line (``None``: settings).
        decoder: an object with ``decode(bytes, ...)`` used instead of the codec (tests).
        service_refs: service name -> ``"module:SERVICE"`` instead of the installed entry
            points (tests).
    """

    bootstrap: str | None = None
    registry: str | None = None
    decoder: Any = None
    service_refs: Mapping[str, str] | None = None
    _settings: Any = field(default=None, repr=False)
    _codec: Any = field(default=None, repr=False)
    _services: Any = field(default=None, repr=False)

    @property
    def settings(self) -> Any:
        """``CommonSettings()``, read once.

        Raises:
            pydantic.ValidationError: a ``CASESTREAM_*`` variable is invalid (the command
                line turns it into one line naming it).
        """
        if self._settings is None:
            # lazy (start-up cost): settings need pydantic, which `schemas check` does not
            from casestream.service.settings import CommonSettings

            self._settings = CommonSettings()
        return self._settings

    @property
    def kafka_bootstrap(self) -> str:
        """The command line's ``--bootstrap`` or ``CASESTREAM_KAFKA_BOOTSTRAP``."""
        return self.bootstrap or self.settings.kafka_bootstrap

    def kafka_client(self, bootstrap: str | None = None) -> dict[str, Any]:
        """The Kafka connection of a command: ``bootstrap`` (else ``--bootstrap``, else
        CASESTREAM_KAFKA_BOOTSTRAP) with the client properties of the settings
        (CASESTREAM_KAFKA_PROPERTIES_FILE, CASESTREAM_KAFKA_PROP_*): TLS, SASL."""
        return dict(self.settings.kafka_client(bootstrap or self.bootstrap))

    @property
    def registry_url(self) -> str:
        """The command line's registry URL or ``CASESTREAM_REGISTRY_URL``."""
        return self.registry or self.settings.registry_url

    def services(self) -> dict[str, Any]:
        """Service name -> :class:`~casestream.service.ServiceSpec`, discovered once.

        Raises:
            ConfigError: an entry point does not resolve to a ServiceSpec.
        """
        if self._services is None:
            from casestream.service.discovery import services

            self._services = services(self.service_refs)
        return dict(self._services)

    def codec(self, *, auto_register: bool = False) -> Any:
        """The envelope codec over the registry, prepared once (``decoder`` if one is set).

        ``auto_register`` applies to the first call only (the codec is then cached).
        """
        if self.decoder is not None:
            return self.decoder
        if self._codec is None:
            # lazy (start-up cost): loaded when this command runs, not for every CLI call
            from casestream.events import load_catalog, open_codec
            from casestream.service.discovery import catalog_folders, schema_folders

            # every installed catalog: an operator's command decodes what any installed
            # service writes, wherever it is run; ./schemas only when nothing is installed
            folders = schema_folders() or catalog_folders()
            from casestream.events.registry import ConfluentSchemaRegistry

            registry = ConfluentSchemaRegistry(self.registry_url,
                                               options=self.settings.registry_properties)
            codec = open_codec(load_catalog(*folders), registry, auto_register=auto_register)
            self._codec = codec
        return self._codec

    def close(self) -> None:
        """Close the codec (its registry client) if one was opened."""
        codec, self._codec = self._codec, None
        if codec is not None:
            codec.close()


def cli_context(ctx: click.Context | None = None) -> CliContext:
    """The invocation's :class:`CliContext` (``ctx``: default the current click context).

    Made and stored on the root context when absent; a ``dict`` object given by a caller
    (``CliRunner().invoke(cmd, obj={...})``) becomes its fields. Closed with the context.
    """
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    obj = root.obj
    if isinstance(obj, CliContext):
        return obj
    made = CliContext(**obj) if isinstance(obj, dict) else CliContext()
    root.obj = made
    root.call_on_close(made.close)
    ctx.obj = made
    return made


class ServiceName(click.ParamType):
    """A discovered service's name (choices read when the command runs, not at import).

    Args:
        outbox_only: accept only services whose spec says ``outbox=True``.
    """

    name = "service"

    def __init__(self, *, outbox_only: bool = False) -> None:
        self.outbox_only = outbox_only

    def choices(self, ctx: click.Context | None) -> list[str]:
        specs = cli_context(ctx).services() if ctx is not None else {}
        return [n for n, s in specs.items() if s.outbox or not self.outbox_only]

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SERVICE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        known = self.choices(ctx)
        if value not in known:
            what = "services with an outbox" if self.outbox_only else "services"
            self.fail(f"{value!r} is not one of the discovered {what}: "
                      f"{', '.join(known) or 'none installed'}", param, ctx)
        return value
