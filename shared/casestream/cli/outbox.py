"""``casestream outbox``: inspect and re-drive transactional outbox rows, per service database.

Commands::

    casestream outbox status  [--service S]... [--dsn URL]...   pending / failed / oldest age / relays
    casestream outbox list    [--service S | --dsn URL] [--status failed] [--limit 20]
    casestream outbox show    ID [--service S | --dsn URL] [--raw]   one row, payload decoded
    casestream outbox redrive [--service S | --dsn URL] (ID... | --all-failed)   failed -> pending
    casestream outbox discard [--service S | --dsn URL] ID... --reason TEXT     failed -> discarded

Databases: ``--service case`` means ``CASESTREAM_PG_URL`` + ``/case`` (``CommonSettings``);
``--dsn`` gives a full URL. Without either, ``status`` covers the five services.
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
from typing import Any

import click
import psycopg

from casestream.outbox.writer import NOTIFY_CHANNEL

SERVICES = ("case", "decision", "notification", "audit", "saga")


def _settings() -> Any:
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.service.settings import CommonSettings

    return CommonSettings()


def _targets(services: Sequence[str], dsns: Sequence[str], *, default_all: bool) -> list[tuple[str, str]]:
    out = [(d, d) for d in dsns]
    names = list(services) or (list(SERVICES) if default_all and not dsns else [])
    if names:
        s = _settings()
        out.extend((n, s.database_url(n)) for n in names)
    if not out:
        raise click.UsageError("give --service NAME or --dsn URL")
    return out


def _one(service: str | None, dsn: str | None) -> tuple[str, str]:
    if bool(service) == bool(dsn):
        raise click.UsageError("give exactly one of --service NAME or --dsn URL")
    return _targets([service] if service else [], [dsn] if dsn else [], default_all=False)[0]


_db_options = [
    click.option("--service", "service", type=click.Choice(SERVICES), help="service database"),
    click.option("--dsn", "dsn", help="PostgreSQL URL of the database"),
]


def _with_db(f: Any) -> Any:
    for opt in reversed(_db_options):
        f = opt(f)
    return f


@click.group("outbox")
def outbox() -> None:
    """Inspect and re-drive transactional outbox rows."""


@outbox.command("status")
@click.option("--service", "services", multiple=True, type=click.Choice(SERVICES))
@click.option("--dsn", "dsns", multiple=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per database")
def status(services: tuple[str, ...], dsns: tuple[str, ...], as_json: bool) -> None:
    """Pending and failed rows, oldest pending age (s), relay instances and their shards."""
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.outbox.relay.store import stats

    failures = 0
    for label, url in _targets(services, dsns, default_all=True):
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                st = stats(conn)
                relays = conn.execute(
                    "SELECT m.name, m.owner, count(l.shard) FILTER (WHERE l.locked_until > now()) "
                    "FROM outbox_relay_member m LEFT JOIN outbox_relay_lease l ON l.locked_by = m.owner "
                    "WHERE m.heartbeat_until > now() GROUP BY m.name, m.owner ORDER BY m.owner"
                ).fetchall()
                published = conn.execute(
                    "SELECT count(*) FROM outbox WHERE status = 'published'").fetchone()[0]
        except psycopg.errors.UndefinedTable:
            click.echo(f"{label}: no outbox table (this service publishes nothing)")
            continue
        except psycopg.Error as e:
            failures += 1
            click.echo(f"{label}: unavailable ({str(e).strip().splitlines()[0]})", err=True)
            continue
        if as_json:
            click.echo(json.dumps({"database": label, "pending": st.pending, "failed": st.failed,
                                   "oldest_pending_age_seconds": round(st.oldest_pending_age_s, 3),
                                   "published_retained": published,
                                   "relays": [{"name": r[0], "owner": r[1], "shards": r[2]} for r in relays]}))
        else:
            relay_text = ", ".join(f"{r[1]} ({r[2]} shards)" for r in relays) or "none"
            click.echo(f"{label}: pending={st.pending} failed={st.failed} "
                       f"oldest_pending_age_s={st.oldest_pending_age_s:.1f} "
                       f"published_retained={published} relays: {relay_text}")
    if failures:
        raise SystemExit(1)


@outbox.command("list")
@_with_db
@click.option("--status", "row_status", type=click.Choice(["failed", "pending", "published", "discarded"]),
              default="failed", show_default=True)
@click.option("--limit", default=20, show_default=True)
def list_rows(service: str | None, dsn: str | None, row_status: str, limit: int) -> None:
    """List rows of one status, oldest first."""
    _, url = _one(service, dsn)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, seq, aggregatetype, aggregateid, type, aggregate_version, attempts, "
            "CASE WHEN next_attempt_at = '-infinity' THEN NULL ELSE next_attempt_at END, "
            "last_error FROM outbox WHERE status = %s ORDER BY seq LIMIT %s",
            (row_status, limit),
        ).fetchall()
    for r in rows:
        err = f" error={r[8]!r}" if r[8] else ""
        click.echo(f"{r[0]} seq={r[1]} {r[2]}/{r[3]} {r[4]} v{r[5]} attempts={r[6]} "
                   f"next={r[7].isoformat() if r[7] else '-'}{err}")
    if not rows:
        click.echo(f"no {row_status} rows")


def _decode(payload: bytes) -> tuple[str, Any]:
    """Return ("decoded", dict) via the codec, or ("raw", text) when decoding is unavailable."""
    try:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        from casestream.events.catalog import load_catalog
        from casestream.events.codec import open_codec
        from casestream.service.discovery import catalog_folders

        with open_codec(load_catalog(*catalog_folders()), _settings().registry_url,
                        auto_register=False) as codec:
            env = codec.decode(payload)
    except Exception as e:  # noqa: BLE001 - any failure falls back to the raw bytes
        return "raw", f"(not decoded: {type(e).__name__}: {e})"
    from dataclasses import asdict, is_dataclass

    data = asdict(env) if is_dataclass(env) else dict(vars(env))
    return "decoded", data


_SHOW = """
SELECT id, aggregatetype, aggregateid, type, aggregate_version, event_version, tenant_id,
       correlation_id, traceparent, seq, shard, occurred_at, created_at, status, attempts,
       CASE WHEN next_attempt_at = '-infinity' THEN NULL ELSE next_attempt_at END AS next_attempt_at,
       last_error, published_at, kafka_partition, kafka_offset, payload
FROM outbox WHERE id = %s
"""


@outbox.command("show")
@click.argument("event_id")
@_with_db
@click.option("--raw", is_flag=True, help="do not decode; print the payload as hex")
def show(event_id: str, service: str | None, dsn: str | None, raw: bool) -> None:
    """Show one outbox row with its payload decoded (Avro, via the schema registry)."""
    _, url = _one(service, dsn)
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(_SHOW, (_ids([event_id])[0],))
        row = cur.fetchone()
        names = [d.name for d in cur.description or []]
    if row is None:
        raise click.ClickException(f"no outbox row {event_id}")
    record = dict(zip(names, row))
    payload = bytes(record.pop("payload"))
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
    _, url = _one(service, dsn)
    with psycopg.connect(url) as conn:
        with conn.transaction():
            if all_failed:
                cur = conn.execute("UPDATE outbox SET status = 'pending', attempts = 0, "
                                   "next_attempt_at = '-infinity' WHERE status = 'failed'")
            else:
                cur = conn.execute("UPDATE outbox SET status = 'pending', attempts = 0, "
                                   "next_attempt_at = '-infinity' "
                                   "WHERE status = 'failed' AND id = ANY(%s)", (_ids(ids),))
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    click.echo(f"re-driven: {cur.rowcount} row(s)")


@outbox.command("discard")
@click.argument("ids", nargs=-1, required=True)
@_with_db
@click.option("--reason", required=True, help="why the event must not be published (kept in last_error)")
def discard(ids: tuple[str, ...], service: str | None, dsn: str | None, reason: str) -> None:
    """Give failed rows up: status discarded; their aggregates' later events flow again."""
    _, url = _one(service, dsn)
    with psycopg.connect(url) as conn:
        with conn.transaction():
            cur = conn.execute(
                "UPDATE outbox SET status = 'discarded', "
                "last_error = coalesce(last_error, '') || ' | discarded: ' || %s "
                "WHERE status = 'failed' AND id = ANY(%s)", (reason, _ids(ids)))
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    click.echo(f"discarded: {cur.rowcount} row(s)")
