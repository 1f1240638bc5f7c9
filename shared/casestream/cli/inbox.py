"""``casestream inbox``: retention of consumer inbox and version-guard rows.

Commands::

    casestream inbox purge (--service S | --dsn URL) --consumer NAME --topic T [--topic T ...]
                           [--min-age-s 604800] [--margin-s 600] [--compact-guards] [--dry-run]

Deletes the inbox rows of consumer NAME (= its Kafka group id) that no redelivery can need:
none processed at or after the record at the group's committed offset, none newer than the
topic's retention or than the oldest record still in the log, none younger than the dedup
window (``--min-age-s``). The rules are :mod:`casestream.consumer.retention`'s; services run
the same job every ``<SVC>_INBOX_RETENTION_INTERVAL_S``. ``--compact-guards`` also deletes
``flowing`` version-guard rows older than the cutoff: only for a consumer whose first-seen
policy is BASELINE (a STRICT consumer would take the aggregate's next event for a gap).
Idempotent: a second run deletes nothing more until the cutoff moves.
Exit status: 0 done (also when nothing may be purged: the line says why), 1 broker or
database error, 2 bad usage.
"""

from __future__ import annotations

import click

from casestream.cli.context import ServiceName, cli_context


@click.group("inbox", context_settings={"help_option_names": ["-h", "--help"]})
def inbox() -> None:
    """Retention of consumer inbox and version-guard rows."""


@inbox.command("purge")
@click.option("--service", type=ServiceName(), default=None, help="Discovered service whose database holds the inbox.")
@click.option("--dsn", default=None, help="Database URL holding the inbox (instead of --service).")
@click.option("--consumer", required=True, help="Consumer name (= Kafka group id).")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic the consumer reads (repeat).")
@click.option("--min-age-s", type=click.FloatRange(min=0), default=7 * 86400.0, show_default=True,
              help="Dedup window: rows younger than this are kept, seconds.")
@click.option("--margin-s", type=click.FloatRange(min=0), default=600.0, show_default=True,
              help="Allowance for producer clocks and librdkafka retries, seconds.")
@click.option("--compact-guards", is_flag=True, help="Also delete old flowing guard rows (BASELINE consumers only).")
@click.option("--dry-run", is_flag=True, help="Print the cutoff and counts; delete nothing.")
def purge(service: str | None, dsn: str | None, consumer: str, topics: tuple[str, ...], min_age_s: float,
          margin_s: float, compact_guards: bool, dry_run: bool) -> None:
    """Delete inbox rows of CONSUMER that no redelivery can need."""
    # lazy (start-up cost): loaded when this command runs
    from casestream.consumer.retention import InboxRetention, RetentionSettings

    if (service is None) == (dsn is None):
        raise click.UsageError("give exactly one of --service NAME or --dsn URL")
    context = cli_context()
    url = dsn or str(context.services()[str(service)].read_settings().dsn)
    job = InboxRetention(url, context.kafka_bootstrap, {consumer: (topics, compact_guards)},
                         RetentionSettings(min_age_s=min_age_s, margin_s=margin_s))
    try:
        runs = job.run_once(dry_run=dry_run)
    except Exception as e:  # noqa: BLE001 - KafkaException / psycopg.Error: one line, exit 1
        raise click.ClickException(f"inbox purge {consumer}: {e}") from e
    for run in runs:
        cut = run.cutoff
        verb = "would purge" if dry_run else "purged"
        if cut.at is None:
            click.echo(f"{run.consumer}: nothing may be purged: {cut.reason}")
        else:
            click.echo(f"{run.consumer}: cutoff {cut.at.isoformat()} ({cut.reason}); {verb} "
                       f"{run.purged} inbox rows" + (f", {run.compacted} guard rows" if compact_guards else ""))
