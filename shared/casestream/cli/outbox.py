"""``casestream outbox``: inspect and re-drive transactional outbox rows, per service database.

Commands::

    casestream outbox status  [--service S]... [--dsn URL]...   pending / failed / oldest age / relays
    casestream outbox list    [--service S | --dsn URL] [--status failed] [--limit 20]
    casestream outbox show    ID [--service S | --dsn URL] [--raw]   one row, payload decoded
    casestream outbox redrive [--service S | --dsn URL] (ID... | --all-failed)   failed -> pending
    casestream outbox discard [--service S | --dsn URL] ID... --reason TEXT     failed -> discarded

Databases: ``--service NAME`` is a discovered service with an outbox (entry point group
``casestream.services``, ``outbox=True``) and means its settings' database URL
(``spec.read_settings().dsn``: ``CASESTREAM_PG_URL`` + ``CASESTREAM_<NAME>_DATABASE``);
``--dsn`` gives a full URL. Without either, ``status`` covers every discovered service with
an outbox. The SQL is :mod:`casestream.outbox.admin`'s.
Decoding uses ``casestream.events.codec.EnvelopeCodec`` with the schema registry of
``CASESTREAM_REGISTRY_URL``; if that is unavailable the payload is shown raw.

A re-driven row gets ``attempts = 0`` and is due at once; a NOTIFY wakes the relay.
Discarding gives a failed row up for good: it stops holding back its aggregate's later
events (which are then published without it) — use only when the event must not be sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click

from casestream.cli.context import ServiceName, cli_context
from casestream.outbox import (
    ROW_STATUSES,
    NoOutboxTable,
    OutboxDatabaseError,
    outbox_status,
)
from casestream.outbox import discard as discard_rows
from casestream.outbox import list_rows as outbox_rows
from casestream.outbox import redrive as redrive_rows
from casestream.outbox import show_row


def _service_dsn(name: str) -> str:
    """The database URL of discovered service ``name`` (its settings' ``dsn``)."""
    return str(cli_context().services()[name].read_settings().dsn)


def _targets(services: Sequence[str], dsns: Sequence[str], *, default_all: bool) -> list[tuple[str, str]]:
    out = [(d, d) for d in dsns]
    names = list(services)
    if not names and default_all and not dsns:
        names = [n for n, spec in cli_context().services().items() if spec.outbox]
    out.extend((n, _service_dsn(n)) for n in names)
    if not out:
        raise click.UsageError("give --service NAME or --dsn URL")
    return out


def _one(service: str | None, dsn: str | None) -> tuple[str, str]:
    if bool(service) == bool(dsn):
        raise click.UsageError("give exactly one of --service NAME or --dsn URL")
    return _targets([service] if service else [], [dsn] if dsn else [], default_all=False)[0]


_db_options = [
    click.option("--service", "service", type=ServiceName(outbox_only=True),
                 help="a discovered service with an outbox: its database"),
    click.option("--dsn", "dsn", help="PostgreSQL URL of the database"),
]


def _with_db(f: Any) -> Any:
    for opt in reversed(_db_options):
        f = opt(f)
    return f


def _fail(label: str, e: OutboxDatabaseError) -> click.ClickException:
    return click.ClickException(f"{label}: {e}")


@click.group("outbox")
def outbox() -> None:
    """Inspect and re-drive transactional outbox rows."""


@outbox.command("status")
@click.option("--service", "services", multiple=True, type=ServiceName(outbox_only=True),
              help="a discovered service with an outbox (repeatable; default all of them)")
@click.option("--dsn", "dsns", multiple=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per database")
def status(services: tuple[str, ...], dsns: tuple[str, ...], as_json: bool) -> None:
    """Pending and failed rows, oldest pending age (s), relay instances and their shards.

    When CDC (Debezium) publishes the outbox: the replication slot's lag in bytes and the
    rows it has not confirmed yet (and their oldest age) instead of pending rows."""
    failures = 0
    for label, url in _targets(services, dsns, default_all=True):
        try:
            st = outbox_status(url)
        except NoOutboxTable:
            click.echo(f"{label}: no outbox table (this service publishes nothing)")
            continue
        except OutboxDatabaseError as e:
            failures += 1
            click.echo(f"{label}: unavailable ({e})", err=True)
            continue
        if st.cdc is not None:
            _echo_cdc(label, st.cdc, as_json)
        elif as_json:
            click.echo(json.dumps({"database": label, "publisher": "relay", "pending": st.pending,
                                   "failed": st.failed,
                                   "oldest_pending_age_seconds": round(st.oldest_pending_age_s, 3),
                                   "published_retained": st.published_retained,
                                   "relays": [asdict(r) for r in st.relays]}))
        else:
            relay_text = ", ".join(f"{r.owner} ({r.shards} shards)" for r in st.relays) or "none"
            click.echo(f"{label}: pending={st.pending} failed={st.failed} "
                       f"oldest_pending_age_s={st.oldest_pending_age_s:.1f} "
                       f"published_retained={st.published_retained} relays: {relay_text}")
    if failures:
        raise SystemExit(1)


def _echo_cdc(label: str, cdc: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"database": label, "publisher": "cdc", "slot": cdc.slot,
                               "slot_exists": cdc.slot_exists, "slot_active": cdc.slot_active,
                               "confirmed_lsn": cdc.confirmed_lsn, "lag_bytes": cdc.lag_bytes,
                               "unconfirmed": cdc.unconfirmed,
                               "oldest_unconfirmed_age_seconds": round(cdc.oldest_unconfirmed_age_s, 3)}))
        return
    state = "active" if cdc.slot_active else ("inactive" if cdc.slot_exists else "MISSING")
    click.echo(f"{label}: publisher=cdc slot={cdc.slot} ({state}) lag_bytes={cdc.lag_bytes} "
               f"unconfirmed={cdc.unconfirmed} oldest_unconfirmed_age_s={cdc.oldest_unconfirmed_age_s:.1f}")


@outbox.command("list")
@_with_db
@click.option("--status", "row_status", type=click.Choice(list(ROW_STATUSES)),
              default="failed", show_default=True)
@click.option("--limit", default=20, show_default=True)
def list_rows(service: str | None, dsn: str | None, row_status: str, limit: int) -> None:
    """List rows of one status, oldest first."""
    label, url = _one(service, dsn)
    try:
        rows = outbox_rows(url, row_status, limit)
    except OutboxDatabaseError as e:
        raise _fail(label, e) from None
    for r in rows:
        err = f" error={r.last_error!r}" if r.last_error else ""
        click.echo(f"{r.id} seq={r.seq} {r.aggregatetype}/{r.aggregateid} {r.type} "
                   f"v{r.aggregate_version} attempts={r.attempts} "
                   f"next={r.next_attempt_at.isoformat() if r.next_attempt_at else '-'}{err}")
    if not rows:
        click.echo(f"no {row_status} rows")


def _decode(payload: bytes) -> tuple[str, Any]:
    """Return ("decoded", dict) via the codec, or ("raw", text) when decoding is unavailable."""
    try:
        env = cli_context().codec().decode(payload)
    except Exception as e:  # noqa: BLE001 - any failure falls back to the raw bytes
        return "raw", f"(not decoded: {type(e).__name__}: {e})"
    from dataclasses import is_dataclass

    data = asdict(env) if is_dataclass(env) else dict(vars(env))
    return "decoded", data


@outbox.command("show")
@click.argument("event_id")
@_with_db
@click.option("--raw", is_flag=True, help="do not decode; print the payload as hex")
def show(event_id: str, service: str | None, dsn: str | None, raw: bool) -> None:
    """Show one outbox row with its payload decoded (Avro, via the schema registry)."""
    label, url = _one(service, dsn)
    try:
        record = show_row(url, _ids([event_id])[0])
    except OutboxDatabaseError as e:
        raise _fail(label, e) from None
    if record is None:
        raise click.ClickException(f"no outbox row {event_id}")
    payload = record.pop("payload")
    for k, v in record.items():
        click.echo(f"{k:18} {v}")
    click.echo(f"{'payload_bytes':18} {len(payload)}")
    if raw:
        click.echo(payload.hex())
        return
    kind, decoded = _decode(payload)
    if kind == "decoded":
        click.echo(json.dumps(decoded, indent=2, default=str))
    else:
        click.echo(decoded)
        click.echo(payload[:512].hex())


def _ids(ids: Sequence[str]) -> list[uuid.UUID]:
    try:
        return [uuid.UUID(i) for i in ids]
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


@outbox.command("redrive")
@click.argument("ids", nargs=-1)
@_with_db
@click.option("--all-failed", is_flag=True, help="re-drive every failed row")
def redrive(ids: tuple[str, ...], service: str | None, dsn: str | None, all_failed: bool) -> None:
    """Set failed rows back to pending (attempts 0, due now) and wake the relay."""
    if bool(ids) == all_failed:
        raise click.UsageError("give row ids or --all-failed (not both)")
    label, url = _one(service, dsn)
    try:
        n = redrive_rows(url, None if all_failed else _ids(ids))
    except OutboxDatabaseError as e:
        raise _fail(label, e) from None
    click.echo(f"re-driven: {n} row(s)")


@outbox.command("discard")
@click.argument("ids", nargs=-1, required=True)
@_with_db
@click.option("--reason", required=True, help="why the event must not be published (kept in last_error)")
def discard(ids: tuple[str, ...], service: str | None, dsn: str | None, reason: str) -> None:
    """Give failed rows up: status discarded; their aggregates' later events flow again."""
    label, url = _one(service, dsn)
    try:
        n = discard_rows(url, _ids(ids), reason)
    except OutboxDatabaseError as e:
        raise _fail(label, e) from None
    click.echo(f"discarded: {n} row(s)")


@outbox.command("handover")
@click.option("--to", "to", type=click.Choice(["cdc", "relay"]), required=True,
              help="the publisher to switch to: cdc (Debezium) or relay")
@_with_db
@click.option("--connect-url", envvar="CASESTREAM_CONNECT_URL", show_envvar=True,
              help="Kafka Connect REST API: the connector is created (--to cdc) or deleted (--to relay); "
                   "without it the connector is yours to run")
@click.option("--bootstrap", envvar="CASESTREAM_KAFKA_BOOTSTRAP", show_envvar=True,
              help="Kafka bootstrap servers (default with --service: the service's)")
@click.option("--slot", help="replication slot and publication (default casestream_<database>_outbox)")
@click.option("--drop-slot", is_flag=True, help="--to relay: drop the replication slot afterwards")
@click.option("--timeout-s", default=120.0, show_default=True, help="bound of each wait, seconds")
def handover_cmd(to: str, service: str | None, dsn: str | None, connect_url: str | None,
                 bootstrap: str | None, slot: str | None, drop_slot: bool, timeout_s: float) -> None:
    """Switch who publishes the outbox, relay <-> Debezium, while the service keeps writing:
    nothing is lost; rows both published are duplicates the consumers' inboxes drop.

    \b
    --to cdc:   creates the publication + slot and the connector, waits until the relay
                published every row committed before the slot, then stops the relay from
                claiming and waits for a marker row to come through Debezium.
    --to relay: waits for a marker row to come through Debezium and the slot to confirm
                it, marks the rows Debezium published, and lets the relay take the rest;
                the connector is deleted.
    Then restart the service with CASESTREAM_<SERVICE>_OUTBOX_PUBLISHER set to the new value
    (the relay of a running service already obeys the switch).
    """
    from casestream.outbox.cdc import CdcError
    from casestream.outbox.connect import ConnectClient, ConnectError, connector_name
    from casestream.outbox.switch import connector_for_dsn, handover

    label, url = _one(service, dsn)
    if bootstrap is None and service:
        bootstrap = str(cli_context().services()[service].read_settings().kafka_bootstrap)
    if not bootstrap:
        raise click.UsageError("give --bootstrap (or CASESTREAM_KAFKA_BOOTSTRAP)")
    database, slot, config = connector_for_dsn(url, slot)
    client = ConnectClient(connect_url) if connect_url else None
    try:
        result = handover(url, to=to, slot=slot, bootstrap=bootstrap, connect=client,
                          connector=connector_name(database), connector_config=config,
                          drop_slot=drop_slot, timeout_s=timeout_s,
                          progress=lambda m: click.echo(f"{label}: {m}"))
    except (CdcError, ConnectError) as e:
        raise click.ClickException(f"{label}: {e}") from None
    finally:
        if client is not None:
            client.close()
    click.echo(f"{label}: publisher={result.publisher} (checkpoint seq {result.seq}, marker "
               f"{result.marker_id}, {result.seconds:.1f} s)")
    if result.failed_below:
        click.echo(f"{label}: warning: {result.failed_below} failed rows at or below seq {result.seq} were "
                   "published by nobody: `casestream outbox list --status failed`", err=True)
