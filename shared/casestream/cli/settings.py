"""``casestream settings``: the environment variables of the platform and of every installed
service, generated from their settings classes (``Field(description=...)``)::

    casestream settings                 the shared CASESTREAM_* variables, then each service's
    casestream settings billing orders  only those services' own variables
    casestream settings --markdown      as Markdown tables (what README.md holds)
"""

from __future__ import annotations

import click

from casestream.cli.context import cli_context

__all__ = ["settings"]


@click.command("settings")
@click.argument("services", nargs=-1)
@click.option("--markdown", is_flag=True, help="Markdown tables instead of aligned text.")
@click.pass_context
def settings(ctx: click.Context, services: tuple[str, ...], markdown: bool) -> None:
    """Print the environment variables of the installed services (default: the shared
    CASESTREAM_* variables and every service's own), with defaults and meanings."""
    # lazy (start-up cost): pydantic loads when this command runs, not for every CLI call
    from casestream.auth import AuthSettings
    from casestream.service.settings import CommonSettings, settings_table
    from casestream.telemetry.settings import TelemetrySettings

    fmt = "markdown" if markdown else "text"
    found = cli_context(ctx).services()
    unknown = [s for s in services if s not in found]
    if unknown:
        raise click.BadParameter(f"unknown service {', '.join(unknown)} (installed: "
                                 f"{', '.join(found) or 'none'})", param_hint="SERVICES")
    sections = [] if services else [("shared by every service", CommonSettings),
                                    ("bearer tokens, every HTTP service", AuthSettings),
                                    ("telemetry, every service", TelemetrySettings)]
    sections += [(f"service {name} ({found[name].settings})", found[name].settings_class())
                 for name in (services or found)]
    for i, (title, cls) in enumerate(sections):
        click.echo(("\n" if i else "") + (f"## {title}\n" if markdown else f"# {title}"))
        click.echo(settings_table(cls, fmt=fmt))
