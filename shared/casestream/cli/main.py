"""The ``casestream`` command line: one entry point, one sub-command group per concern.

Groups are imported lazily so that ``casestream schemas check`` in a team's CI does not
load Kafka or PostgreSQL drivers it does not need::

    casestream schemas check|rules|register   schema compatibility gate (CI), registration
    casestream outbox status|show|redrive   outbox rows pending / failed per service
    casestream dlq list|show|redrive     dead-lettered messages per consumer
    casestream replay NAME | --list      rebuild a projection from the topics
    casestream token --tenant T --role R  mint a local bearer token (JWT)
    casestream status                    consumer lag, outbox, dead letters, sagas per service
    casestream console                   the operations web console
    casestream topics plan|apply         the installed services' declared topics on the cluster
    casestream new service NAME          write a service skeleton (a starting point)
    casestream catalog asyncapi          the installed event catalog as an AsyncAPI 3.0 document

Installed packages add commands through the entry point group ``casestream.commands``
(``name = "module:click_command"``, :func:`casestream.service.discovery.command_refs`). A
contributed name equal to a built-in one is refused (one line on stderr; the built-in
stays); a contributed command whose module does not import is one line, exit status 2.
Every command shares one :class:`~casestream.cli.context.CliContext` (``ctx.obj``).
"""

from __future__ import annotations

import importlib
import sys

import click

from casestream.cli.context import cli_context

#: What a base install (``pip install casestream``: the schema gate only) lacks for the rest.
SERVICE_EXTRA_HINT = "pip install 'casestream[service]'"

_GROUPS: dict[str, tuple[str, str, str]] = {
    "schemas": ("casestream.cli.schemas", "schemas", "Check Avro schema compatibility (CI gate); register the catalog."),
    "outbox": ("casestream.cli.outbox", "outbox", "Inspect and re-drive transactional outbox rows."),
    "dlq": ("casestream.cli.dlq", "dlq", "List, show and re-drive dead-lettered messages."),
    "inbox": ("casestream.cli.inbox", "inbox",
              "Purge consumer inbox rows no redelivery can need (retention)."),
    "replay": ("casestream.cli.replay", "replay",
               "Rebuild a projection from the topics (shadow tables, swap, hand over)."),
    "settings": ("casestream.cli.settings", "settings",
                 "Environment variables of the installed services, with defaults."),
    "token": ("casestream.cli.token", "token",
              "Mint a local bearer token (JWT) for a tenant and roles."),
    "status": ("casestream.cli.status", "status",
               "Per-service table: consumer lag, outbox, dead letters, sagas."),
    "console": ("casestream.console.command", "console",
                "Serve the operations web console: journeys, sagas, dead letters, flow, catalog."),
    "migrate": ("casestream.cli.migrate", "migrate",
                "Apply the installed services' database migrations (before starting them)."),
    "topics": ("casestream.cli.topics", "topics",
               "Create and configure the topics the installed services declare (plan, apply)."),
    "catalog": ("casestream.cli.catalog", "catalog",
                "The event catalog (AsyncAPI 3.0) of the installed services and schemas."),
    "new": ("casestream.cli.new", "new",
            "Write a starting point: casestream new service NAME (a service skeleton)."),
}


class ConfigurationError(click.ClickException):
    """Bad settings (an environment variable) or configuration: one line, exit status 2."""

    exit_code = 2


def _contributed() -> dict[str, str]:
    """Command name -> ``"module:attr"`` of the installed ``casestream.commands`` entry points
    that do not clash with a built-in group (a clash is one line on stderr, then ignored)."""
    from casestream.service.discovery import command_refs

    out = {}
    for name, ref in command_refs().items():
        if name in _GROUPS:
            click.echo(f"casestream: ignoring command {name!r} = {ref} (entry point group "
                       f"casestream.commands): it clashes with the built-in command", err=True)
            continue
        out[name] = ref
    return out


def _needs_extra(cmd_name: str, e: ModuleNotFoundError) -> ConfigurationError:
    """A third-party module missing: one line naming the extra, exit status 2."""
    if (e.name or "").partition(".")[0] in ("casestream", "services", ""):
        raise e
    return ConfigurationError(f"'{cmd_name}' needs the service packages ({e.name} is not "
                              f"installed): {SERVICE_EXTRA_HINT}")


class _LazyGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        # Settings are read inside the commands; a bad variable must read as one line naming
        # it, not as a traceback (casestream.service.settings.settings_error).
        from casestream.errors import CasestreamError, ConfigError

        try:
            return super().invoke(ctx)
        except ConfigError as e:
            raise ConfigurationError(str(e)) from None
        except CasestreamError as e:  # e.g. the registry or a database did not answer
            raise click.ClickException(f"{type(e).__name__}: {e}") from None
        except ModuleNotFoundError as e:
            raise _needs_extra(ctx.invoked_subcommand or "casestream", e) from None
        except Exception as e:
            pydantic = sys.modules.get("pydantic")  # not imported: e is not its ValidationError
            if pydantic is not None and isinstance(e, pydantic.ValidationError):
                from casestream.service.settings import describe_settings_error

                raise ConfigurationError(str(describe_settings_error(e))) from None
            kafka = sys.modules.get("confluent_kafka")  # not imported: e is not a KafkaException
            if kafka is not None and isinstance(e, kafka.KafkaException):
                raise click.ClickException(f"Kafka did not answer (CASESTREAM_KAFKA_BOOTSTRAP): "
                                           f"{e.args[0] if e.args else e}") from None
            raise

    def _contributed(self, ctx: click.Context) -> dict[str, str]:
        meta = ctx.find_root().meta
        if "casestream.contributed" not in meta:
            meta["casestream.contributed"] = _contributed()
        return meta["casestream.contributed"]  # type: ignore[no-any-return]

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_GROUPS, *self._contributed(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        contributed = self._contributed(ctx)  # also says, once, which names clash
        if cmd_name not in _GROUPS:
            ref = contributed.get(cmd_name)
            return None if ref is None else _load_contributed(cmd_name, ref)
        module_name, attr, help_text = _GROUPS[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise _needs_extra(cmd_name, e) from None

            @click.command(cmd_name, help=f"{help_text} (not available in this build)")
            def unavailable() -> None:
                raise click.ClickException(f"'{cmd_name}' is not available in this build")

            return unavailable
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _GROUPS[name][2]) for name in sorted(_GROUPS)]
        rows += [(name, _contributed_help(ref)) for name, ref in self._contributed(ctx).items()]
        rows.sort()
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _contributed_help(ref: str) -> str:
    """The short help of a contributed command (imports it: ``casestream --help`` only), or
    where it comes from when it does not import."""
    from casestream.service.spec import resolve

    where = f"(from {ref.partition(':')[0]})"
    try:
        command = resolve(ref)
    except Exception:  # noqa: BLE001 - listed as unavailable; running it says why
        return f"{where} not available"
    if not isinstance(command, click.Command):
        return f"{where} not a click command"
    return f"{command.get_short_help_str(limit=60)} {where}"


def _load_contributed(cmd_name: str, ref: str) -> click.Command:
    """The click command of a ``casestream.commands`` entry point.

    Raises:
        ConfigurationError: it does not import (a third-party module missing: naming the
            service extra) or is not a click command (one line, exit 2).
    """
    from casestream.errors import ConfigError
    from casestream.service.spec import resolve

    try:
        command = resolve(ref)
    except ConfigError as e:
        missing = e.__cause__
        own = ref.partition(":")[0]
        if isinstance(missing, ModuleNotFoundError) and missing.name and \
                not (own + ".").startswith(missing.name + ".") and \
                missing.name.partition(".")[0] not in ("casestream", "services"):
            raise _needs_extra(cmd_name, missing) from None
        raise ConfigurationError(f"command {cmd_name!r} ({ref}) is not available: "
                                 f"{str(e).splitlines()[0]}") from None
    if not isinstance(command, click.Command):
        raise ConfigurationError(f"command {cmd_name!r}: {ref} is not a click command "
                                 f"({type(command).__name__})")
    return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="casestream", prog_name="casestream", message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context) -> None:
    """casestream: event-driven case management on Kafka.

    Operate the outbox relay and the dead-letter topics, and check the Avro schema
    catalog in CI. Endpoints come from CASESTREAM_* environment variables
    (CASESTREAM_KAFKA_BOOTSTRAP, CASESTREAM_REGISTRY_URL, CASESTREAM_PG_URL).
    """
    cli_context(ctx)


if __name__ == "__main__":
    main(prog_name="casestream")
