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
    With CASESTREAM_ENV=production it refuses to start on what a service refuses (the
    development key...).
    What it shows is configured by CASESTREAM_CONSOLE_* (services, consumers, journey
    topics; default: the installed services and their catalogs). Runs until Ctrl-C."""
    # lazy (start-up cost): the web stack loads only for this command
    import uvicorn

    from casestream.auth import AuthSettings, TokenVerifier
    from casestream.console.app import console_app
    from casestream.console.settings import ConsoleSettings
    from casestream.console.sources import ConsoleSources
    from casestream.errors import ConfigError

    ctx = cli_context()
    production = ctx.settings.env == "production"
    auth = AuthSettings()
    try:
        # the services' production policy (CommonSettings.production_problems), applied to the
        # console's own settings and key before anything is read or served
        _console_policy(ctx.settings, auth).require_production_ready("console")
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    settings = ConsoleSettings()
    # every installed catalog, prepared as a service prepares its codec: registering missing
    # schemas where CASESTREAM_AUTO_REGISTER_SCHEMAS allows it (development), else looking ids up
    codec = ctx.codec(auto_register=ctx.settings.auto_register_schemas)
    # operator input names topics: no client of the console may create one (librdkafka
    # allow.auto.create.topics, which its admin metadata requests honour as well)
    kafka = {**ctx.kafka_client(), "allow.auto.create.topics": False}
    _ensure_actions_topic(kafka)
    sources = ConsoleSources.discover(settings, kafka=kafka, codec=codec)
    app = console_app(sources, TokenVerifier(auth), production=production)
    click.echo(f"console: http://{host or settings.host}:{port or settings.port} "
               f"({len(sources.services)} services, {len(sources.consumers)} consumers)")
    # the services' telemetry: spans and http_server_duration_seconds labelled by route
    # template, the edge's counters, GET /metrics (no token, never shed)
    from casestream import telemetry
    from casestream.telemetry.http import TracingMiddleware

    try:
        telemetry.install("console")  # exporters from OTEL_* / CASESTREAM_TELEMETRY_*
    except ConfigError as e:
        raise click.ClickException(f"telemetry configuration: {e}") from None
    telemetry.sources().add_counters("console", app.state.counters)
    uvicorn.run(TracingMiddleware(app, serve_metrics=True), host=host or settings.host,
                port=port or settings.port, log_level="warning")


def _console_policy(common: object, auth: object) -> object:
    """The services' settings (``CommonSettings`` ``common``) with the console's ``auth``,
    so :meth:`~casestream.service.settings.CommonSettings.production_problems` judges the
    console exactly as it judges a service."""
    return common.model_copy(update={"auth": auth})  # type: ignore[attr-defined]


def _ensure_actions_topic(kafka: dict) -> None:
    """Create the operator-action topic if missing: the one topic the console writes that no
    service declares, and its clients may not auto-create any. A refusal (ACLs: provisioned
    elsewhere) is logged; an action then fails naming the topic."""
    import logging

    from casestream.consumer.runtime import ensure_topics
    from casestream.operations.actions import actions_topic

    try:
        ensure_topics(kafka, [actions_topic()], timeout_s=10)
    except Exception as e:  # noqa: BLE001 - librdkafka errors: the console still serves its pages
        logging.getLogger(__name__).warning("console: operator-action topic %s not created: %s",
                                            actions_topic(), e)
