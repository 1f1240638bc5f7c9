"""``casestream replay``: rebuild a projection from the topics.

    casestream replay --list
    casestream replay <projection> [--from earliest|<ISO time>|<topic:partition:offset,...>]
                      [--to now|<ISO time>] [--merge | --only-range] [--dry-run]
                      [--batch-size N] [--workers N] [--restart] [--dsn URL]

Part of the history (``--from`` after the beginning, or a topic whose retention removed its
first events) is never swapped in silently: ``--merge`` applies the range over a copy of the
live tables (rows of earlier events are kept), ``--only-range`` replaces the live tables by
the range; with neither the replay refuses in one line (exit 2). ``--dry-run`` prints which.

Projections are the discovered ones (entry point group ``casestream.projections``); an
unknown name is a usage error listing them. Endpoints from ``CASESTREAM_*``
(``CommonSettings``, the CLI's shared context); the projection's database from its service's
settings (``CASESTREAM_<SVC>_DATABASE``) unless ``--dsn`` is given.
Exit status: 0 done, 1 replay failed (checkpoint kept: rerun resumes), 2 bad usage or a
partial replay refused.
"""

from __future__ import annotations

import os
import sys

import click

from casestream.cli.context import cli_context


@click.command("replay", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("projection", required=False)
@click.option("--list", "list_", is_flag=True, help="List projections with topics and freshness.")
@click.option("--from", "from_", default="earliest", show_default=True,
              help="earliest | ISO-8601 time | topic:partition:offset,...")
@click.option("--to", "to", default="now", show_default=True,
              help="now (swap and hand over when caught up) | ISO-8601 time (build only).")
@click.option("--merge", is_flag=True,
              help="Over part of the history: apply the range over a copy of the live tables, "
                   "then swap (rows of events before the range are kept).")
@click.option("--only-range", is_flag=True,
              help="Over part of the history: the live tables are replaced by the range alone "
                   "(rows of events before it are dropped).")
@click.option("--dry-run", is_flag=True,
              help="Print topics, partitions, offset ranges, count and the mode (rebuild, "
                   "merge, only-range, build only or refused).")
@click.option("--batch-size", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Events per transaction.")
@click.option("--workers", type=click.IntRange(min=1), default=min(2, os.cpu_count() or 1),
              show_default=True,
              help="Worker processes for the bulk (partitions are split between them; 1 = in "
                   "this process). Two use a second core for decoding: ~1.5x on 2 cores.")
@click.option("--restart", is_flag=True, help="Start over even if an unfinished run exists.")
@click.option("--dsn", default=None, help="Database URL of the projection (default: service's).")
def replay(projection: str | None, list_: bool, from_: str, to: str, merge: bool, only_range: bool,
           dry_run: bool, batch_size: int, workers: int, restart: bool, dsn: str | None) -> None:
    """Rebuild PROJECTION into shadow tables in REPLAY mode, swap and hand over to live."""
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.replay import (
        PartialReplayRefused,
        ProgressReporter,
        Replayer,
        ReplayError,
        ReplayOptions,
        load_projection,
        parse_from,
        parse_to,
    )
    context = cli_context()
    bootstrap = context.kafka_client()
    if list_:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        from casestream.replay.status import kafka_problem, project_status

        problem = kafka_problem(bootstrap)
        rows = project_status(bootstrap, with_lag=problem is None)
        if not rows:
            click.echo("no projections installed (entry point group casestream.projections)")
        for row in rows:
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
                                batch_size=batch_size, restart=restart, workers=workers,
                                merge=merge, only_range=only_range)
    except ReplayError as e:
        raise click.UsageError(str(e)) from e
    codec = context.codec(auto_register=context.settings.auto_register_schemas)
    try:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        replayer = Replayer(spec, codec=codec, dsn=dsn or spec.dsn(),
                            bootstrap=bootstrap,
                            event_types=codec.catalog.event_types,
                            reporter=ProgressReporter(spec.name, sys.stderr))
        if dry_run:
            for line in replayer.plan(options).lines():
                click.echo(line)
            return
        result = replayer.run(options)
    except PartialReplayRefused as e:
        from casestream.cli.main import ConfigurationError  # one line, exit status 2

        raise ConfigurationError(str(e)) from e
    except ReplayError as e:
        raise click.ClickException(str(e)) from e
    finally:
        context.close()
    click.echo(f"{result.projection}: {result.read} events read, {result.applied} applied, "
               f"{result.rate:,.0f} events/s, "
               + ("swapped in" if result.swapped else f"built in {', '.join(result.tables)}"))

