"""``casestream replay``: rebuild a projection from the topics.

    casestream replay --list
    casestream replay <projection> [--from earliest|<ISO time>|<topic:partition:offset,...>]
                      [--to now|<ISO time>] [--dry-run] [--batch-size N] [--workers N] [--restart]
                      [--dsn URL]

Endpoints from ``CASESTREAM_*`` (``CommonSettings``); the projection's database from its
service's settings (e.g. ``CASESTREAM_AUDIT_DATABASE``) unless ``--dsn`` is given.
Exit status: 0 done, 1 replay failed (checkpoint kept: rerun resumes), 2 bad usage.
"""

from __future__ import annotations

import os
import sys

import click


@click.command("replay", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("projection", required=False)
@click.option("--list", "list_", is_flag=True, help="List projections with topics and freshness.")
@click.option("--from", "from_", default="earliest", show_default=True,
              help="earliest | ISO-8601 time | topic:partition:offset,...")
@click.option("--to", "to", default="now", show_default=True,
              help="now (swap and hand over when caught up) | ISO-8601 time (build only).")
@click.option("--dry-run", is_flag=True, help="Print topics, partitions, offset ranges, count.")
@click.option("--batch-size", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Events per transaction.")
@click.option("--workers", type=click.IntRange(min=1), default=min(2, os.cpu_count() or 1),
              show_default=True,
              help="Worker processes for the bulk (partitions are split between them; 1 = in "
                   "this process). Two use a second core for decoding: ~1.5x on 2 cores.")
@click.option("--restart", is_flag=True, help="Start over even if an unfinished run exists.")
@click.option("--dsn", default=None, help="Database URL of the projection (default: service's).")
def replay(projection: str | None, list_: bool, from_: str, to: str, dry_run: bool,
           batch_size: int, workers: int, restart: bool, dsn: str | None) -> None:
    """Rebuild PROJECTION into shadow tables in REPLAY mode, swap and hand over to live."""
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.replay import (
        ProgressReporter,
        Replayer,
        ReplayError,
        ReplayOptions,
        load_projection,
        parse_from,
        parse_to,
    )
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.service.settings import CommonSettings

    settings = CommonSettings()
    if list_:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        from casestream.replay.status import kafka_problem, project_status

        problem = kafka_problem(settings.kafka_bootstrap)
        for row in project_status(settings.kafka_bootstrap, with_lag=problem is None):
            for line in row.lines():
                click.echo(line)
        if problem:
            raise click.ClickException(f"{problem}; consumer lag not shown")
        return
    if not projection:
        raise click.UsageError("give a PROJECTION name or --list")
    try:
        spec = load_projection(projection)
        options = ReplayOptions(start=parse_from(from_, spec.topics), end=parse_to(to),
                                batch_size=batch_size, restart=restart, workers=workers)
    except ReplayError as e:
        raise click.UsageError(str(e)) from e
    codec = _codec(settings)
    try:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        from casestream.events.catalog import load_catalog

        replayer = Replayer(spec, codec=codec, dsn=dsn or spec.dsn(),
                            bootstrap=settings.kafka_bootstrap,
                            event_types=load_catalog().event_types,
                            reporter=ProgressReporter(spec.name, sys.stderr))
        if dry_run:
            for line in replayer.plan(options).lines():
                click.echo(line)
            return
        result = replayer.run(options)
    except ReplayError as e:
        raise click.ClickException(str(e)) from e
    finally:
        close = getattr(getattr(codec, "registry", None), "close", None)
        if close is not None:
            close()
    click.echo(f"{result.projection}: {result.read} events read, {result.applied} applied, "
               f"{result.rate:,.0f} events/s, "
               + ("swapped in" if result.swapped else f"built in {', '.join(result.tables)}"))


def _codec(settings: object) -> object:
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.events.catalog import load_catalog
    from casestream.events.codec import EnvelopeCodec
    from casestream.events.registry import ConfluentSchemaRegistry
    from casestream.upcasters import default_upcasters

    codec = EnvelopeCodec(load_catalog(), ConfluentSchemaRegistry(settings.registry_url),  # type: ignore[attr-defined]
                          default_upcasters())
    codec.prepare(auto_register=settings.auto_register_schemas)  # type: ignore[attr-defined]
    return codec
