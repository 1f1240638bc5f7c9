"""``casestream catalog asyncapi``: the installed event catalog as an AsyncAPI 3.0 document.

Built from every installed schemas folder and service spec (entry points
``casestream.schemas`` and ``casestream.services``, :mod:`casestream.service.eventcatalog`):
channels (topics), messages (Avro schemas per version), producers, consumers, upcasters.
Nothing is started and no broker or registry is asked, so it runs in CI.
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["catalog"]

_EXIT_CODES = """\b
Exit status:
  0  written
  1  the file cannot be written
  2  bad configuration (no schemas folder installed, a malformed catalog, an entry point
     that does not resolve, a topic declared by two services)
"""


@click.group("catalog")
def catalog() -> None:
    """The event catalog of the installed services and schemas folders."""


@catalog.command("asyncapi", epilog=_EXIT_CODES)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (default: standard output).")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default=None,
              help="Output format (default: yaml for an --output ending in .yaml/.yml, else json).")
@click.option("--title", default="casestream event catalog", show_default=True, help="The document's info.title.")
def asyncapi(output: Path | None, fmt: str | None, title: str) -> None:
    """Write the AsyncAPI 3.0 document of the installed event catalog.

    Channels are the topics; messages are the event types, one per version, with their Avro
    schemas (envelope + payload, as registered); a `send` operation per topic a service's
    outbox writes (ServiceSpec.topics), a `receive` operation per topic a consumer group reads
    (ServiceSpec.subscriptions); each message lists the upcaster steps from it. A team's
    service appears once its package with those entry points is installed.
    """
    from casestream.errors import ConfigError, SchemaError
    from casestream.events.asyncapi import render
    from casestream.service.eventcatalog import installed_asyncapi

    if fmt is None:
        fmt = "yaml" if output is not None and output.suffix.lower() in (".yaml", ".yml") else "json"
    try:
        text = render(installed_asyncapi(title=title), fmt)
    except SchemaError as e:  # a malformed catalog or upcaster chain: configuration, one line
        raise ConfigError(f"event catalog: {e}") from None
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise click.ClickException(f"--output {output}: {e.strerror or e}") from None
    click.echo(f"wrote {output} ({fmt})", err=True)
