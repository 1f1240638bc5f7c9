"""``casestream console``: serve the operations web console (:mod:`casestream.console.app`)."""

from __future__ import annotations

import click

from casestream.cli.context import cli_context

__all__ = ["console"]


@click.command("console")
@click.option("--host", default=None, help="Listen address (default CASESTREAM_CONSOLE_HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Listen port (default CASESTREAM_CONSOLE_PORT, 18100).")
def console(host: str | None, port: int | None) -> None:
    """Serve the operations console: journeys, sagas, dead letters, flow.

    Sign in with a bearer token of the services (same key and roles: CASESTREAM_AUTH_*).
    What it shows is configured by CASESTREAM_CONSOLE_* (services, consumers, journey
    topics; default: the installed services and their catalogs). Runs until Ctrl-C."""
    # lazy (start-up cost): the web stack loads only for this command
    import uvicorn

    from casestream.auth import AuthSettings, TokenVerifier
    from casestream.console.app import console_app
    from casestream.console.settings import ConsoleSettings
    from casestream.console.sources import ConsoleSources
    from casestream.events import load_catalog, open_codec
    from casestream.events.registry import ConfluentSchemaRegistry
    from casestream.service.discovery import catalog_folders, schema_folders

    ctx = cli_context()
    settings = ConsoleSettings()
    # a reader: decodes by the schema ids on the wire, so nothing needs registering first
    # (auto_register=None: not prepared); every installed catalog, as the CLI's commands
    codec = open_codec(load_catalog(*(schema_folders() or catalog_folders())),
                       ConfluentSchemaRegistry(ctx.registry_url, options=ctx.settings.registry_properties),
                       auto_register=None)
    sources = ConsoleSources.discover(settings, kafka=ctx.kafka_client(), codec=codec)
    app = console_app(sources, TokenVerifier(AuthSettings()))
    click.echo(f"console: http://{host or settings.host}:{port or settings.port} "
               f"({len(sources.services)} services, {len(sources.consumers)} consumers)")
    uvicorn.run(app, host=host or settings.host, port=port or settings.port, log_level="warning")
