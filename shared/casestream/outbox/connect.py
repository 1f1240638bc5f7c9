"""Debezium as the outbox publisher: the connector configuration that puts on Kafka what the
relay puts there, and a small client of the Kafka Connect REST API.

:func:`outbox_connector_config` is the one source of the configuration (the files in
``deploy/debezium/`` are its output for the local stack, checked by a contract test). What
each setting does and why it has this value is in :data:`SETTINGS_EXPLAINED`, printed by
``casestream outbox connector --explain``.

Errors: :class:`ConnectError` (the REST API refused a request or did not answer; the message
has Connect's own ``message``).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx

from casestream.errors import CasestreamError
from casestream.outbox.cdc import default_slot_name

__all__ = ["ConnectError", "ConnectClient", "SETTINGS_EXPLAINED", "outbox_connector_config",
           "connector_name"]


class ConnectError(CasestreamError):
    """The Kafka Connect REST API refused a request, did not answer, or a connector task failed."""


#: (setting, value, why) for every setting :func:`outbox_connector_config` writes that is not
#: a database address. Values are strings, as Connect stores them.
SETTINGS_EXPLAINED: tuple[tuple[str, str, str], ...] = (
    ("connector.class", "io.debezium.connector.postgresql.PostgresConnector", "Debezium's PostgreSQL source"),
    ("tasks.max", "1", "a PostgreSQL connector has one task (one replication slot)"),
    ("plugin.name", "pgoutput", "PostgreSQL's built-in logical decoding plugin: nothing to install on the server"),
    ("publication.autocreate.mode", "filtered", "a publication for table.include.list only"),
    ("table.include.list", "public.outbox,public.casestream_cdc_heartbeat",
     "the outbox table, and the heartbeat row heartbeat.action.query updates (its UPDATEs are "
     "skipped like the outbox's: nothing of it reaches Kafka but the slot's LSN)"),
    ("snapshot.mode", "no_data", "no initial snapshot: rows from before the slot's creation are the relay's "
     "(casestream outbox handover decides who publishes which rows)"),
    ("skipped.operations", "u,d,t", "only INSERTs are events; the relay's status UPDATEs and retention "
     "DELETEs are not"),
    ("tombstones.on.delete", "false", "no tombstones for the retention DELETEs"),
    ("key.converter", "org.apache.kafka.connect.storage.StringConverter", "key = aggregateid as UTF-8, like the relay"),
    ("value.converter", "io.debezium.converters.BinaryDataConverter", "value = the payload bytes unchanged "
     "(Confluent Avro framing as written)"),
    ("value.converter.delegate.converter.type", "org.apache.kafka.connect.json.JsonConverter",
     "used only for records that are not bytes (none from the outbox)"),
    ("value.converter.delegate.converter.type.schemas.enable", "false", "see the delegate"),
    ("header.converter", "org.apache.kafka.connect.storage.SimpleHeaderConverter",
     "header values as UTF-8 text, like the relay; a NULL column gives a null-valued header, "
     "which is the contract of both publishers (casestream.outbox.headers_for)"),
    ("binary.handling.mode", "bytes", "bytea columns stay bytes"),
    ("transforms", "outbox", "the Outbox Event Router"),
    ("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter", "Debezium's outbox SMT"),
    ("transforms.outbox.table.field.event.id", "id", "header id = outbox.id"),
    ("transforms.outbox.table.field.event.key", "aggregateid", "the message key"),
    ("transforms.outbox.table.field.event.payload", "payload", "the message value"),
    ("transforms.outbox.route.by.field", "aggregatetype", "topic per aggregate type"),
    ("transforms.outbox.route.topic.replacement", "outbox.event.${routedByValue}",
     "the relay's topic_for(): outbox.event.<aggregatetype>"),
    ("transforms.outbox.table.fields.additional.placement",
     "type:header:type,event_version:header:event_version,traceparent:header:traceparent,"
     "correlation_id:header:correlation_id",
     "the other contract headers, in the relay's order"),
    ("transforms.outbox.table.expand.json.payload", "false", "the payload is Avro, not JSON"),
    ("transforms.outbox.table.op.invalid.behavior", "warn", "log (not fail on) a non-INSERT that got through"),
    ("extended.headers.enabled", "false", "no __debezium.context.* headers (Debezium >= 3.2.1 adds four "
     "by default): the header set stays the relay's"),
    ("poll.interval.ms", "5", "how long the task waits for a batch of change events to fill before "
     "handing it to Connect; the default 500 ms is most of the latency at low rates (p50 670 ms "
     "at 1,000 events/s)"),
    ("max.batch.size", "4096", "change events per batch handed to Connect (default 2048): fewer "
     "round trips draining a backlog"),
    ("max.queue.size", "16384", "events buffered between the WAL reader and the task (default 8192; "
     "must exceed max.batch.size): the reader keeps streaming while a batch is produced"),
    ("heartbeat.interval.ms", "1000", "the connector confirms its LSN to the slot at least every second "
     "even when the outbox is idle and other databases write WAL: the slot's lag (and "
     "casestream's CDC status and retention) keep moving, and PostgreSQL can recycle WAL"),
    ("heartbeat.action.query", "UPDATE public.casestream_cdc_heartbeat SET beat_at = now()",
     "a change every heartbeat in a captured table: pgoutput sends nothing for other tables' "
     "or databases' transactions, so without it an idle outbox's slot keeps all WAL written "
     "since the last outbox row (measured: 256 MB of unrelated WAL left it 153 MB behind) and "
     "those last rows stay unconfirmed; the table is made by `casestream outbox handover`"),
    ("topic.heartbeat.prefix", "__debezium-heartbeat", "heartbeat records go to "
     "__debezium-heartbeat.<topic.prefix>, never to an outbox topic"),
    ("producer.override.enable.idempotence", "true", "as the relay: retries never duplicate or reorder"),
    ("producer.override.acks", "all", "as the relay: a record counts once every in-sync replica has it"),
    ("producer.override.linger.ms", "1", "as the relay: batch briefly, do not wait"),
    ("producer.override.max.in.flight.requests.per.connection", "5", "the most idempotence keeps in order"),
    ("producer.override.batch.size", "1000000", "bytes per partition batch, librdkafka's default that the "
     "relay uses (the Java producer's 16384 sends a 100,000-row backlog in many small requests)"),
)

#: Connect's producer partitioner is murmur2 of the key, the relay's ``murmur2_random``: the
#: same partition for the same aggregate id, so nothing needs to be set for it.


def connector_name(database: str) -> str:
    """The connector of a database's outbox: ``<database>-outbox``."""
    return f"{database}-outbox"


def outbox_connector_config(database: str, *, host: str = "127.0.0.1", port: int = 15432,
                            user: str = "postgres", password: str = "",
                            slot: str | None = None, topic_prefix: str | None = None) -> dict[str, str]:
    """The Debezium connector configuration for ``database``'s outbox (a Connect config map).

    ``slot`` (also the publication name) default :func:`default_slot_name`; ``topic_prefix``
    (Debezium's logical server name, used only for the heartbeat topic) default
    ``casestream-<database>``.
    """
    slot = slot or default_slot_name(database)
    config = {
        "database.hostname": host, "database.port": str(port), "database.user": user,
        "database.password": password, "database.dbname": database,
        "topic.prefix": topic_prefix or f"casestream-{database}",
        "slot.name": slot, "publication.name": slot,
    }
    config.update({name: value for name, value, _why in SETTINGS_EXPLAINED})
    return config


class ConnectClient:
    """The Kafka Connect REST API at ``url`` (e.g. ``http://127.0.0.1:18083``); ``timeout_s``
    per request."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        """Close the HTTP client."""
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 204)) -> Any:
        try:
            resp = self._http.request(method, self.url + path, json=body)
        except httpx.HTTPError as e:
            raise ConnectError(f"Kafka Connect at {self.url}: {e}") from None
        if resp.status_code not in ok:
            try:
                detail = resp.json().get("message", resp.text)
            except ValueError:
                detail = resp.text
            raise ConnectError(f"Kafka Connect {method} {path}: HTTP {resp.status_code}: {detail}")
        return resp.json() if resp.content else None

    def put(self, name: str, config: dict[str, str]) -> None:
        """Create connector ``name`` or replace its configuration."""
        self._call("PUT", f"/connectors/{quote(name)}/config", {**config, "name": name})

    def start_fresh(self, name: str, config: dict[str, str], *, timeout_s: float = 60.0) -> None:
        """Create (or reconfigure) connector ``name`` with its source offsets removed, so it
        starts where its replication slot is rather than at an LSN stored for an earlier slot
        of the same name (Debezium refuses that one: "no longer available on the server").
        Kafka Connect's offset API (KIP-875): created ``STOPPED``, ``DELETE .../offsets``,
        then resumed."""
        path = f"/connectors/{quote(name)}"
        if self.exists(name):
            self.put(name, config)
            self._call("PUT", f"{path}/stop", ok=(202, 204))
        else:
            self._call("POST", "/connectors", {"name": name, "config": {**config, "name": name},
                                               "initial_state": "STOPPED"})
        deadline = time.monotonic() + timeout_s
        while self.state(name)[0] != "STOPPED":
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} did not stop within {timeout_s:.0f} s")
            time.sleep(0.2)
        self._call("DELETE", f"{path}/offsets", ok=(200, 202))
        self._call("PUT", f"{path}/resume", ok=(202, 204))

    def delete(self, name: str) -> bool:
        """Delete connector ``name`` (its offsets stay in Connect's offset topic); False if absent."""
        try:
            resp = self._http.delete(f"{self.url}/connectors/{quote(name)}")
        except httpx.HTTPError as e:
            raise ConnectError(f"Kafka Connect at {self.url}: {e}") from None
        if resp.status_code not in (200, 204, 404):
            raise ConnectError(f"Kafka Connect DELETE /connectors/{name}: HTTP {resp.status_code}: {resp.text}")
        return resp.status_code != 404

    def exists(self, name: str) -> bool:
        """Whether connector ``name`` exists."""
        return bool(self._call("GET", f"/connectors/{quote(name)}", ok=(200, 404)).get("name"))

    def state(self, name: str) -> tuple[str, list[str]]:
        """(connector state, [task states]); ``("ABSENT", [])`` when there is no such connector."""
        st = self._call("GET", f"/connectors/{quote(name)}/status", ok=(200, 404))
        if "connector" not in st:
            return "ABSENT", []
        return st["connector"]["state"], [t["state"] for t in st.get("tasks", [])]

    def wait_running(self, name: str, *, timeout_s: float = 60.0) -> None:
        """Return once the connector and its task run.

        Raises:
            ConnectError: a task FAILED (with its trace's first line) or ``timeout_s`` passed.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            st = self._call("GET", f"/connectors/{quote(name)}/status", ok=(200, 404))
            tasks = st.get("tasks", [])
            failed = [t for t in tasks if t.get("state") == "FAILED"]
            if failed:
                trace = (failed[0].get("trace") or "").strip().splitlines()
                raise ConnectError(f"connector {name}: task failed: {trace[0] if trace else 'no trace'}")
            if st.get("connector", {}).get("state") == "RUNNING" and tasks and all(
                    t.get("state") == "RUNNING" for t in tasks):
                return
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} not running after {timeout_s:.0f} s: {st}")
            time.sleep(0.2)
