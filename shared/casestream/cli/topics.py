"""``casestream topics plan|apply``: the installed services' declared topics on a real cluster.

Each service declares the topics it owns in its spec (``ServiceSpec(topics=(TopicSpec(...),
...))``). ``plan`` prints what differs between those declarations and the cluster; ``apply``
makes it so (:mod:`casestream.kafka.topicplan`, :mod:`casestream.kafka.topicadmin`).
"""

from __future__ import annotations

from typing import Any

import click

from casestream.cli.context import cli_context

__all__ = ["topics"]

_EXIT_CODES = """\b
Exit status:
  0  plan: printed (no refusal); apply: applied, or nothing to do
  1  refused (a topic would lose partitions, or two services declare it; apply changes
     nothing), or Kafka refused or did not answer
  2  bad configuration (unknown --service, an invalid CASESTREAM_* variable)
  3  plan --check only: there are changes to apply
"""


@click.group("topics", epilog=_EXIT_CODES)
@click.option("--bootstrap", help="Kafka bootstrap servers (default CASESTREAM_KAFKA_BOOTSTRAP).")
@click.pass_context
def topics(ctx: click.Context, bootstrap: str | None) -> None:
    """Create and configure the topics the installed services declare.

    A service declares the topics it owns in its ServiceSpec (topics=(TopicSpec(...),)):
    partitions, replication factor, retention.ms, cleanup.policy, min.insync.replicas and
    other topic configs. `plan` shows the difference with the cluster, `apply` applies it:
    creates missing topics, adds partitions, sets differing configs. Refused: fewer
    partitions than the cluster has (Kafka cannot remove them) and a topic declared by two
    services. A replication-factor difference is reported, not applied (it needs a partition
    reassignment). Topics no installed service declares are never touched. Connection:
    CASESTREAM_KAFKA_BOOTSTRAP and the client properties (CASESTREAM_KAFKA_PROP_*,
    CASESTREAM_KAFKA_PROPERTIES_FILE).
    """
    if bootstrap:
        cli_context(ctx).bootstrap = bootstrap


_service_option = click.option(
    "--service", "services", multiple=True, metavar="NAME",
    help="Only this service's topics (repeatable; default: every installed service).")
_timeout_option = click.option("--timeout", type=float, default=30.0, show_default=True,
                               help="Seconds to wait for each Kafka request.")


def _plan(ctx: click.Context, services: tuple[str, ...], timeout: float) -> tuple[Any, Any]:
    """(admin client, plan) for the installed services' declared topics."""
    # lazy (start-up cost): the Kafka driver loads only when this command runs
    from casestream.kafka.topicadmin import observe_topics, topic_admin
    from casestream.kafka.topicplan import plan_topics

    cli = cli_context(ctx)
    declared = {name: spec.topics for name, spec in cli.services().items()}
    plan_topics(declared, {}, services or None)  # an unknown --service before Kafka is asked
    admin = topic_admin(cli.kafka_client())
    wanted = [t for name in (services or declared) for t in declared[name]]
    observed = observe_topics(admin, wanted, timeout)
    return admin, plan_topics(declared, observed, services or None)


def _print(plan: Any) -> None:
    for line in plan.lines():
        click.echo(line)


@topics.command("plan", epilog=_EXIT_CODES)
@_service_option
@_timeout_option
@click.option("--check", is_flag=True, help="Exit with status 3 when there is something to apply.")
@click.pass_context
def plan(ctx: click.Context, services: tuple[str, ...], timeout: float, check: bool) -> None:
    """Print what `apply` would change: + create, ~ partitions, ~ config, ! replication
    (reported only), refused: ... (apply would change nothing)."""
    _admin, planned = _plan(ctx, services, timeout)
    _print(planned)
    if planned.refusals:
        ctx.exit(1)
    if check and planned.pending:
        ctx.exit(3)


@topics.command("apply", epilog=_EXIT_CODES)
@_service_option
@_timeout_option
@click.option("--missing-only", is_flag=True,
              help="Only create missing topics; leave existing ones as they are (what the dev "
                   "stack does).")
@click.pass_context
def apply(ctx: click.Context, services: tuple[str, ...], timeout: float, missing_only: bool) -> None:
    """Apply the plan: create missing topics, add partitions, set differing configs; then
    wait until every partition has a leader. Changes nothing when the plan has a refusal."""
    from casestream.kafka.topicadmin import apply_topic_plan

    admin, planned = _plan(ctx, services, timeout)
    if missing_only:
        left = len(planned.changes) - len([c for c in planned.changes if c.action == "create"])
        planned = planned.missing_only()
        if left:
            click.echo(f"{left} change(s) to existing topics not applied (--missing-only): "
                       "see casestream topics plan", err=True)
    if planned.refusals:
        for refusal in planned.refusals:
            click.echo(f"refused: {refusal}", err=True)
        click.echo("nothing applied", err=True)
        ctx.exit(1)
    for note in planned.notes:  # a replication-factor difference: reported, never applied
        click.echo(note.describe(), err=True)
    from casestream.errors import CasestreamError

    try:
        apply_topic_plan(admin, planned, timeout_s=timeout, echo=click.echo)
    except CasestreamError as e:
        raise click.ClickException(f"{e} (the steps printed above are applied; run apply "
                                   "again)") from None
    click.echo(f"{len(planned.changes)} change(s) applied, {len(planned.in_sync)} topic(s) "
               "were up to date")
