"""The ``casestream`` command line: one entry point, one sub-command group per concern.

Groups are imported lazily so that ``casestream schemas check`` in a team's CI does not
load Kafka or PostgreSQL drivers it does not need::

    casestream schemas check|register   schema catalog and compatibility (CI)
    casestream outbox status|show|redrive   outbox rows pending / failed per service
    casestream dlq list|show|redrive     dead-lettered messages per consumer
    casestream reconcile [--repair]      drift between cases, sagas and outboxes
    casestream token --tenant T --role R  mint a local bearer token (JWT)
    casestream status                    consumer lag, outbox, dead letters, sagas per service
"""

from __future__ import annotations

import importlib
import sys

import click

#: What a base install (``pip install casestream``: the schema gate only) lacks for the rest.
SERVICE_EXTRA_HINT = "pip install 'casestream[service]'"

_GROUPS: dict[str, tuple[str, str, str]] = {
    "schemas": ("casestream.cli.schemas", "schemas", "Check and register the Avro schema catalog."),
    "outbox": ("casestream.cli.outbox", "outbox", "Inspect and re-drive transactional outbox rows."),
    "dlq": ("casestream.cli.dlq", "dlq", "List, show and re-drive dead-lettered messages."),
    # The reconciliation job knows the services' tables and repairs through the saga
    # service's own code, so it lives with that service; the CLI only mounts it.
    "reconcile": ("services.saga.adapters.cli_reconcile", "reconcile",
                  "Find and repair drift between cases, sagas and outboxes."),
    "replay": ("casestream.cli.replay", "replay",
               "Rebuild a projection from the topics (shadow tables, swap, hand over)."),
    "token": ("casestream.cli.token", "token",
              "Mint a local bearer token (JWT) for a tenant and roles."),
    "status": ("casestream.cli.status", "status",
               "Per-service table: consumer lag, outbox, dead letters, sagas."),
}


class ConfigurationError(click.ClickException):
    """Bad settings (an environment variable) or configuration: one line, exit status 2."""

    exit_code = 2


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
        from casestream.errors import ConfigError

        try:
            return super().invoke(ctx)
        except ConfigError as e:
            raise ConfigurationError(str(e)) from None
        except ModuleNotFoundError as e:
            raise _needs_extra(ctx.invoked_subcommand or "casestream", e) from None
        except Exception as e:
            pydantic = sys.modules.get("pydantic")  # not imported: e is not its ValidationError
            if pydantic is None or not isinstance(e, pydantic.ValidationError):
                raise
            from casestream.service.settings import describe_settings_error

            raise ConfigurationError(str(describe_settings_error(e))) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_GROUPS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _GROUPS:
            return None
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
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="casestream", prog_name="casestream", message="%(prog)s %(version)s")
def main() -> None:
    """casestream: event-driven case management on Kafka.

    Operate the outbox relay and the dead-letter topics, and check the Avro schema
    catalog in CI. Endpoints come from CASESTREAM_* environment variables
    (CASESTREAM_KAFKA_BOOTSTRAP, CASESTREAM_REGISTRY_URL, CASESTREAM_PG_URL).
    """


if __name__ == "__main__":
    main(prog_name="casestream")
