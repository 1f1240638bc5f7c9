"""``casestream dlq``: list, show (decoded) and re-drive dead-lettered messages of one consumer.

::

    casestream dlq list   [--open] [--json]         every consumer: dead letters on <consumer>.dlq
    casestream dlq list   CONSUMER [--open] [--limit 50] [--json]
    casestream dlq show   CONSUMER --event-id ID | --offset N [--partition P]
    casestream dlq groups [CONSUMER] [--all-states] [--json]   dead letters grouped by failure
    casestream dlq redrive CONSUMER --all | --event-id ID [--event-id ID ...] | --first N | --label P:O ...
                           | --group FINGERPRINT [--after-deploy]
                           [--accept-gap] [--reason TEXT] [--actor NAME] [--yes]
    casestream dlq discard CONSUMER --label P:O [--label P:O ...] | --group FINGERPRINT
                           --reason TEXT [--actor NAME]
    casestream dlq pending [CONSUMER] [--json]     re-drives waiting for a deploy

``dlq groups`` groups the open dead letters by fingerprint (consumer, failure class, exception
type, event type, normalised message; ``casestream.operations.failuregroups``): per group the
count, first and last seen, the failure class and whether a re-drive as is can succeed, and a
sample. ``--group`` acts on every open entry of one group (a fingerprint prefix of at least 4
hex digits). Re-driving entries of a non-retryable class (corrupt bytes, unknown schema id,
schema resolution, invalid event, ...) prints a warning and asks for confirmation (``--yes``
answers it): they fail again the same way until a fix is deployed. ``--group FP --after-deploy``
re-drives nothing now: it records a request that waits for a deploy of the consumer (every
member of its group running a build other than those running now, ``CASESTREAM_BUILD``), and
the consumer's service then re-drives the group by itself (``casestream.operations.afterdeploy``);
``dlq pending`` lists the requests still waiting.

``--open`` shows only the open entries: not re-driven successfully, not discarded, not
superseded by a later dead letter of the same message (``casestream.operations.deadletters``).
``--all`` and ``--first`` of ``redrive`` pick among the open entries. Every re-drive and
discard is recorded on the operator-action topic (who, when, why:
``casestream.operations.actions``), as the web console's actions are.

Dead letters live on ``<consumer>.dlq``; re-drive copies them (bytes and headers unchanged) to
``<consumer>.redrive``, which the running consumer also reads, through the same decode,
upcasters, version guard and inbox — re-driving twice has one effect (see ``casestream.consumer.deadletters``).
``--accept-gap`` unparks an aggregate whose missing event is lost for good (``casestream.handlers.guard``).

``dlq list`` without a consumer lists the consumers of the discovered services
(``ServiceSpec.consumers``) and every other consumer with a ``<consumer>.dlq`` topic, with the
messages on that topic (0 when it does not exist yet).

Endpoints default to ``CASESTREAM_KAFKA_BOOTSTRAP`` / ``CASESTREAM_REGISTRY_URL`` (the CLI's
shared context). Reading never commits consumer-group offsets; the DLQ itself is never modified.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

import click

from casestream.cli.context import cli_context
from casestream.consumer.records import Record
from casestream.consumer.deadletters import (
    H_ATTEMPTS,
    H_LAST,
    H_MESSAGE,
    H_OFFSET,
    H_PARTITION,
    H_REASON,
    H_TIMESTAMP,
    H_TOPIC,
    read_topic,
    select,
)
from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, bootstrap_of, client_config
from casestream.operations import (
    Actor,
    DeadLetterState,
    FailureGroup,
    dead_letter_counts,
    discard_dead_letters,
    failure_groups,
    find_failure_group,
    load_dead_letter_state,
    pending_after_deploy,
    read_actions,
    redrive_dead_letters,
    request_redrive_after_deploy,
    retry_warning,
)

Decoder = Callable[[bytes, Any], Any]


def _bootstrap(ctx: click.Context, value: str | None) -> KafkaTarget:
    """The Kafka connection: ``--bootstrap`` (or CASESTREAM_KAFKA_BOOTSTRAP) with the client
    properties of the settings (security)."""
    return cli_context(ctx).kafka_client(value)


def _decoder(ctx: click.Context, registry_url: str | None) -> Any:
    """The context's decoder (tests) or its codec over the registry (``--registry-url``
    or ``CASESTREAM_REGISTRY_URL``)."""
    context = cli_context(ctx)
    if registry_url:
        context.registry = registry_url
    return context.codec()


def _read(bootstrap: KafkaTarget, consumer: str) -> list[Record]:
    try:
        return read_topic(bootstrap, f"{consumer}.dlq")
    except CasestreamError as e:
        known = _dlq_consumers(bootstrap)
        if known and consumer not in known:
            shown = ", ".join(known[:20]) + (f" … and {len(known) - 20} more" if len(known) > 20 else "")
            raise click.ClickException(f"no dead-letter topic {consumer}.dlq; consumers with "
                                       f"one: {shown}") from None
        raise click.ClickException(str(e)) from None


def _dlq_counts(bootstrap: KafkaTarget) -> dict[str, int]:
    """Consumer name -> messages on its ``<consumer>.dlq`` topic, for every such topic.

    Raises:
        click.ClickException: Kafka did not answer.
    """
    try:
        return dead_letter_counts(bootstrap)
    except CasestreamError as e:
        raise click.ClickException(f"Kafka at {bootstrap_of(bootstrap)} did not answer: {e}") from None


def _dlq_consumers(bootstrap: KafkaTarget) -> list[str]:
    """Consumer names that have a ``<consumer>.dlq`` topic (empty if Kafka does not answer)."""
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        topics = AdminClient(client_config(bootstrap)).list_topics(timeout=5).topics
    except KafkaException:
        return []
    return sorted(t[: -len(".dlq")] for t in topics if t.endswith(".dlq"))


def _summary(r: Record) -> dict[str, Any]:
    return {
        "partition": r.partition, "offset": r.offset, "event_id": r.header("id"),
        "type": r.header("type"), "key": r.key.decode("utf-8", "replace") if r.key else None,
        "reason": r.header(H_REASON), "attempts": r.header(H_ATTEMPTS),
        "last_failure": r.header(H_LAST),
        "origin": f"{r.header(H_TOPIC)}[{r.header(H_PARTITION)}]@{r.header(H_OFFSET)}",
        "message": r.header(H_MESSAGE),
    }


@click.group("dlq")
@click.option("--bootstrap", help="Kafka bootstrap servers (default CASESTREAM_KAFKA_BOOTSTRAP).")
@click.pass_context
def dlq(ctx: click.Context, bootstrap: str | None) -> None:
    """List, show and re-drive dead-lettered messages of a consumer (<consumer>.dlq)."""
    if bootstrap:
        cli_context(ctx).bootstrap = bootstrap


def _state(bootstrap: KafkaTarget, consumer: str) -> DeadLetterState:
    try:
        return load_dead_letter_state(bootstrap, consumer)
    except CasestreamError as e:
        raise click.ClickException(str(e)) from None


def _overview(ctx: click.Context, as_json: bool, only_open: bool = False) -> None:
    """Every discovered consumer and every consumer with a DLQ topic, with its count
    (open entries only with ``only_open``)."""
    bootstrap = _bootstrap(ctx, None)
    counts = _dlq_counts(bootstrap)
    discovered = [c for spec in cli_context(ctx).services().values() for c in spec.consumers]
    names = list(dict.fromkeys([*discovered, *sorted(counts)]))
    if only_open:
        counts = {name: _state(bootstrap, name).depth for name in counts}
    width = max(map(len, names), default=0)
    for name in names:
        note = ("" if name in counts and name in discovered
                else "  (no dead-letter topic yet)" if name not in counts
                else "  (not a consumer of a discovered service)")
        if as_json:
            click.echo(json.dumps({"consumer": name, ("open" if only_open else "dead_letters"):
                                   counts.get(name, 0),
                                   "topic": f"{name}.dlq" if name in counts else None,
                                   "discovered": name in discovered}))
        else:
            click.echo(f"{name:<{width}}  {counts.get(name, 0):>6}{note}")
    if not as_json:
        click.echo(f"{sum(counts.values())} {'open ' if only_open else ''}dead letter(s) on "
                   f"{len(counts)} topic(s)")


@dlq.command("list")
@click.argument("consumer", required=False)
@click.option("--limit", type=int, default=None, help="Show at most N dead letters (oldest first).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--open", "only_open", is_flag=True,
              help="Only open entries: not re-driven successfully, not discarded, not superseded "
                   "by a later dead letter of the same message.")
@click.pass_context
def list_(ctx: click.Context, consumer: str | None, limit: int | None, as_json: bool,
          only_open: bool) -> None:
    """List the dead letters of CONSUMER, oldest first, each with its state (open, redriving,
    resolved, discarded, superseded); without CONSUMER, every consumer (of the discovered
    services, or with a <consumer>.dlq topic) with its dead letters."""
    if consumer is None:
        _overview(ctx, as_json, only_open)
        return
    bootstrap = _bootstrap(ctx, None)
    _read(bootstrap, consumer)  # names the consumers with a topic when this one has none
    state = _state(bootstrap, consumer)
    entries = [e for e in state.entries if e.open or not only_open]
    shown = entries[:limit] if limit is not None else entries
    for e in shown:
        s = {**_summary(e.record), "label": e.label, "state": e.state}
        if as_json:
            click.echo(json.dumps(s))
        else:
            click.echo(f"{s['partition']}:{s['offset']}  {e.state:<10}  {s['event_id'] or '-'}"
                       f"  {s['type'] or '-'}"
                       f"  key={s['key'] or '-'}  reason={s['reason']}  attempts={s['attempts']}"
                       f"  last={s['last_failure']}  from={s['origin']}"
                       f"  {(s['message'] or '')[:120]}")
    if not as_json:
        click.echo(f"{len(entries)} {'open ' if only_open else ''}dead letter(s) on {consumer}.dlq"
                   + ("" if only_open else f" ({state.depth} open)"))


@dlq.command("show")
@click.argument("consumer")
@click.argument("label", required=False)
@click.option("--event-id", help="The dead letter whose header 'id' is this event id.")
@click.option("--offset", type=int, help="The dead letter at this DLQ offset.")
@click.option("--partition", type=int, default=0, show_default=True)
@click.option("--registry-url", help="Schema registry (default CASESTREAM_REGISTRY_URL).")
@click.pass_context
def show(ctx: click.Context, consumer: str, label: str | None, event_id: str | None,
         offset: int | None, partition: int, registry_url: str | None) -> None:
    """Show one dead letter of CONSUMER: headers and the decoded (upcast) envelope.

    Pick it by LABEL, the PARTITION:OFFSET that 'dlq list' prints first on each line
    (e.g. 0:17), or by --event-id, or by --offset (with --partition)."""
    if sum(x is not None for x in (label, event_id, offset)) != 1:
        raise click.UsageError("give exactly one of LABEL (PARTITION:OFFSET), --event-id or --offset")
    if label is not None:
        partition, offset = _parse_label(label)
    records = _read(_bootstrap(ctx, None), consumer)
    if event_id is not None:
        found = select(records, event_ids=[event_id])
    else:
        found = [r for r in records if r.offset == offset and r.partition == partition]
    if not found:
        raise click.ClickException("no such dead letter")
    r = found[-1]
    click.echo(f"dead letter {consumer}.dlq[{r.partition}]@{r.offset}"
               f" key={r.key.decode('utf-8', 'replace') if r.key else None}"
               f" dead-lettered at {_iso(r.published_at)}")
    for k, v in r.headers:
        click.echo(f"  {k}: {v.decode('utf-8', 'replace') if v is not None else None}")
    if r.value is None:
        click.echo("value: <none>")
        return
    decoder = _decoder(ctx, registry_url)
    published_at = _original_time(r)  # the event's publication, not the dead letter's time
    try:
        decode_message = getattr(decoder, "decode_message", None)
        events = (decode_message(r.value, published_at=published_at).events if decode_message
                  else (decoder.decode(r.value, published_at=published_at),))
    except Exception as e:  # noqa: BLE001 - shown to the operator
        click.echo(f"value ({len(r.value)} bytes) not decodable: {type(e).__name__}: {e}")
        click.echo(f"  first bytes: {r.value[:64].hex(' ')}")
        return
    if len(events) != 1:  # an event upcaster made other than one event of the stored one
        click.echo(f"events ({len(events)}, made by the event upcasters of the stored event):")
    for env in events:
        body = asdict(env) if is_dataclass(env) else dict(vars(env))
        if len(events) == 1:
            click.echo("envelope:")
        click.echo(json.dumps(body, indent=2, default=str))


def _iso(ts: Any) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z") if ts is not None else "-"


def _original_time(r: Record) -> Any:
    """The original message's Kafka timestamp (header ``dlq.original.timestamp``, ms), None
    when the header is absent or empty."""
    from datetime import datetime, timezone

    raw = r.header(H_TIMESTAMP) or ""
    return datetime.fromtimestamp(int(raw) / 1000.0, tz=timezone.utc) if raw.isdigit() else None


def _parse_label(label: str) -> tuple[int, int]:
    """``"0:17"`` -> (0, 17); a UsageError naming the expected form otherwise."""
    p, sep, o = label.partition(":")
    if not sep or not p.isdigit() or not o.isdigit():
        raise click.UsageError(f"LABEL must be PARTITION:OFFSET as 'dlq list' prints it (e.g. 0:17),"
                               f" got {label!r}")
    return int(p), int(o)


def _actor(actor: str | None) -> Actor:
    import getpass

    return Actor(actor or getpass.getuser())


def _by_labels(state: DeadLetterState, labels: tuple[str, ...]) -> list[Record]:
    wanted = [f"{p}:{o}" for p, o in map(_parse_label, labels)]
    found = {e.label: e.record for e in state.entries}
    missing = [w for w in wanted if w not in found]
    if missing:
        raise click.ClickException(f"not in {state.consumer}.dlq: {', '.join(missing)}")
    return [found[w] for w in wanted]


def _group(state: DeadLetterState, fingerprint: str) -> FailureGroup:
    found = find_failure_group(state, fingerprint)
    if found is None:
        known = ", ".join(g.fingerprint for g in failure_groups(state)) or "none open"
        raise click.ClickException(f"--group {fingerprint!r}: no single open failure group of "
                                   f"{state.consumer} starts with it (groups: {known})")
    return found


@dlq.command("groups")
@click.argument("consumer", required=False)
@click.option("--all-states", is_flag=True,
              help="Group every entry (also resolved, discarded, superseded), not only the open ones.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@click.pass_context
def groups(ctx: click.Context, consumer: str | None, all_states: bool, as_json: bool) -> None:
    """Dead letters of CONSUMER (default: every consumer with a dead-letter topic) grouped by
    failure fingerprint, largest group first: count, failure class, whether a re-drive as is
    can succeed, first and last seen, event type, exception type, normalised message, a sample."""
    bootstrap = _bootstrap(ctx, None)
    if consumer is not None:
        _read(bootstrap, consumer)
        names = [consumer]
    else:
        names = sorted(_dlq_counts(bootstrap))
    total = 0
    for name in names:
        for g in failure_groups(_state(bootstrap, name), only_open=not all_states):
            total += 1
            if as_json:
                click.echo(json.dumps(g.summary()))
                continue
            kind = "retryable" if g.retryable else "NOT retryable (re-drive after a fix is deployed)"
            click.echo(f"{g.fingerprint}  {g.consumer}  {g.count:>5}  {g.failure_class}  {kind}\n"
                       f"    {g.event_type or '-'}  {g.error_class or '-'}  first {g.first_seen or '-'}"
                       f"  last {g.last_seen or '-'}  sample {g.sample.label}\n"
                       f"    {g.message[:200]}")
    if not as_json:
        click.echo(f"{total} {'' if all_states else 'open '}failure group(s)")


@dlq.command("redrive")
@click.argument("consumer")
@click.option("--all", "all_", is_flag=True, help="Re-drive every open dead letter.")
@click.option("--event-id", "event_ids", multiple=True, help="Re-drive these event ids (repeatable).")
@click.option("--first", type=click.IntRange(min=1), help="Re-drive the first N open dead letters (oldest first).")
@click.option("--label", "labels", multiple=True, metavar="P:O",
              help="Re-drive the dead letter at PARTITION:OFFSET as 'dlq list' prints it (repeatable).")
@click.option("--accept-gap", is_flag=True,
              help="Accept a version gap: the consumer records version-1 as seen and applies it.")
@click.option("--reason", default="re-driven from the command line",
              show_default=True, help="Why (recorded on the operator-action topic, 1..1000 characters).")
@click.option("--actor", help="Who acts (recorded; default: the login name).")
@click.option("--group", "group", metavar="FINGERPRINT",
              help="Re-drive every open dead letter of this failure group ('dlq groups').")
@click.option("--after-deploy", is_flag=True,
              help="With --group: re-drive nothing now; the consumer's service re-drives the group "
                   "once every member of the consumer runs a build other than those running now "
                   "(the fix deployed).")
@click.option("--yes", "-y", is_flag=True, help="Answer the confirmation for non-retryable failures.")
@click.pass_context
def redrive_(ctx: click.Context, consumer: str, all_: bool, event_ids: tuple[str, ...],
             first: int | None, labels: tuple[str, ...], accept_gap: bool, reason: str,
             actor: str | None, group: str | None, after_deploy: bool, yes: bool) -> None:
    """Re-drive dead letters of CONSUMER through its <consumer>.redrive topic; the action is
    recorded (who, when, why) on the operator-action topic."""
    if sum([all_, bool(event_ids), first is not None, bool(labels), group is not None]) != 1:
        raise click.UsageError("give exactly one of --all, --event-id, --first, --label, --group")
    if after_deploy and group is None:
        raise click.UsageError("--after-deploy goes with --group")
    bootstrap = _bootstrap(ctx, None)
    _read(bootstrap, consumer)
    state = _state(bootstrap, consumer)
    if after_deploy:
        try:
            request = request_redrive_after_deploy(bootstrap, _group(state, group), actor=_actor(actor),
                                                   reason=reason)
        except CasestreamError as e:
            raise click.ClickException(str(e)) from e
        click.echo(f"{request.detail}: re-driven by its service then (request {request.action_id})")
        return
    if group is not None:
        chosen = [e.record for e in _group(state, group).entries]
    elif labels:
        chosen = _by_labels(state, labels)
    elif event_ids:
        chosen = select([e.record for e in state.entries if e.state != "superseded"], event_ids=event_ids)
        missing = set(event_ids) - {r.header("id") for r in chosen}
        if missing:
            raise click.ClickException(f"not in {consumer}.dlq: {', '.join(sorted(missing))}")
    else:
        chosen = select([e.record for e in state.open], first=first)
    by_record = {id(e.record): e for e in state.entries}
    warning = retry_warning([by_record[id(r)] for r in chosen if id(r) in by_record])
    if warning:
        click.echo(f"warning: {warning}", err=True)
        if not yes and not click.confirm("re-drive anyway?", default=False, err=True):
            raise click.ClickException("nothing re-driven")
    try:
        done = redrive_dead_letters(bootstrap, consumer, chosen, actor=_actor(actor), reason=reason,
                                    accept_gap=accept_gap)
    except CasestreamError as e:
        raise click.ClickException(str(e)) from e
    click.echo(done.detail)


@dlq.command("discard")
@click.argument("consumer")
@click.option("--label", "labels", multiple=True, metavar="P:O",
              help="The dead letter at PARTITION:OFFSET as 'dlq list' prints it (repeatable).")
@click.option("--group", "group", metavar="FINGERPRINT",
              help="Every open dead letter of this failure group ('dlq groups').")
@click.option("--reason", required=True, help="Why it need not be processed (recorded, 1..1000 characters).")
@click.option("--actor", help="Who acts (recorded; default: the login name).")
@click.pass_context
def discard(ctx: click.Context, consumer: str, labels: tuple[str, ...], group: str | None,
            reason: str, actor: str | None) -> None:
    """Discard dead letters of CONSUMER: they stop counting as open without being processed.
    The dead-letter topic is not changed; the action is recorded (who, when, why)."""
    if bool(labels) == (group is not None):
        raise click.UsageError("give either --label (repeatable) or --group")
    bootstrap = _bootstrap(ctx, None)
    _read(bootstrap, consumer)
    state = _state(bootstrap, consumer)
    chosen = ([e.record for e in _group(state, group).entries] if group is not None
              else _by_labels(state, labels))
    try:
        done = discard_dead_letters(bootstrap, consumer, chosen, actor=_actor(actor), reason=reason)
    except CasestreamError as e:
        raise click.ClickException(str(e)) from e
    click.echo(done.detail)


@dlq.command("pending")
@click.argument("consumer", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per request.")
@click.pass_context
def pending(ctx: click.Context, consumer: str | None, as_json: bool) -> None:
    """Re-drive-after-deploy requests (of CONSUMER, or of every consumer) still waiting for a
    deploy: the failure group, the builds it waits to see replaced, who asked and why."""
    bootstrap = _bootstrap(ctx, None)
    try:
        waiting = pending_after_deploy(read_actions(bootstrap), consumer)
    except CasestreamError as e:
        raise click.ClickException(str(e)) from None
    for a in waiting:
        if as_json:
            click.echo(json.dumps({"request": a.action_id, "consumer": a.target, "at": a.at,
                                   "actor": a.actor, "reason": a.reason, "items": list(a.items), **a.params}))
        else:
            click.echo(f"{a.action_id}  {a.target}  group {a.params.get('fingerprint')}"
                       f" ({a.params.get('failure_class')}, {len(a.items)} dead letter(s))"
                       f"  waits for a build other than {a.params.get('builds')}"
                       f"  asked {a.at} by {a.actor}: {a.reason}")
    if not as_json:
        click.echo(f"{len(waiting)} re-drive(s) waiting for a deploy")
