"""EnvelopeCodec: Envelope <-> Kafka message value (Confluent wire format + Avro binary, by fastavro).

Wire format (Confluent, "Wire format" in the Schema Registry docs)::

    byte 0      magic byte 0x00
    bytes 1-4   schema id, 4-byte big-endian, from the registry (subject = record full name)
    bytes 5-    Avro binary of the composed message schema (envelope fields + typed payload)

Encoding always writes the catalog's composed schema of (event type, version) — the newest
when ``env.event_version`` is None. Decoding reads with the *writer's* schema (looked up by
id: the catalog's own schemas are known after :meth:`EnvelopeCodec.prepare`, other ids are
fetched from the registry once and cached), validates the envelope, then runs the upcaster
chain to the newest version; handlers only see newest payloads. A writer newer than the
catalog (rolling deploy) is read by Avro schema resolution into the newest known version.

Schema identity: the schema id only says how the bytes are laid out; the **envelope's
``event_version``** says which catalog version an event is. One id may stand for several
catalog versions (a registry that deduplicates by a canonical form — Apicurio drops docs,
aliases and enum defaults — answers v2 with v1's id), and ids differ between registries:
a record whose ``event_version`` is not the version its id was read as is read again as
that version — with the catalog's schema when the binary layouts are equal (Avro Parsing
Canonical Form), else by Avro schema resolution from the id's schema. :meth:`prepare`
refuses a registry giving one id to two versions whose layouts differ.

Resolved values are valid values: where Avro resolution filled a reader default, or an
upcaster produced a payload, the payload is repaired (:func:`~casestream.events.values.conform`:
``bytes``/``fixed`` defaults as bytes, logical-type defaults as datetimes/dates) and validated
against the schema it must fit; what still does not fit is a poison message naming the field.
Encoding refuses a naive ``datetime`` in a ``timestamp-*`` field (``InvalidEventError`` naming it).

Event upcasters (``casestream.events.upcasting``) may make zero, one or several events of a
stored one: :meth:`EnvelopeCodec.decode_message` returns them all
(:class:`~casestream.events.envelope.DecodedMessage`), :meth:`EnvelopeCodec.decode` the one.

Avro is fastavro's: ``schemaless_writer`` to write, ``schemaless_reader`` to read (a generated
reader was ~2x faster, but Avro decoding is not this project's to own: a library, even a
slower one, over our own). Every schema is parsed once (in :meth:`EnvelopeCodec.prepare`, or on the first message of an
unknown writer id) and reused on every call. Decoded envelopes of catalog schemas are built
without re-running ``Envelope.__post_init__`` once the codec checked what it checks
(:func:`~casestream.events.envelope.envelope_from_trusted_record`).

fastavro's writer does not range-check ``int`` fields nor type-check ``boolean`` / ``float``
-> ``int``, so encode first runs
``fastavro.validation.validate`` on the payload (the envelope fields are checked by
:class:`~casestream.events.envelope.Envelope` and by the writer), and writes with
``strict_allow_default=True`` (unknown payload keys refused; a missing field with a default
takes it). Reading parses a view of each writer schema without ``logicalType: uuid``
(see :func:`_read_view`): ``event_id`` comes back as the text written, not ``uuid.UUID``.

Errors:
    PoisonMessageError(reason=...) on decode: ``empty``, ``too_short``, ``bad_magic_byte``,
    ``unknown_schema_id``, ``unknown_subject``, ``avro_decode``, ``trailing_bytes``,
    ``schema_resolution``, ``validation``, ``upcast``.
    RegistryUnavailable on decode of an uncached id while the registry is down (transient).
    InvalidEventError / UnknownSchemaError on encode (a bug in the producer, never poison).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

from casestream.events.catalog import Catalog, same_schema
from casestream.events.envelope import DecodedMessage, Envelope, envelope_from_trusted_record
from casestream.errors import PoisonMessageError, SchemaError, UnknownSchemaError
from casestream.events.registry import SchemaRegistry, register_catalog
from casestream.events.upcasting import UpcasterChain
from casestream.events.values import conform, converts, has_instants, naive_datetime

__all__ = ["ENVELOPE_FIELDS", "DecodedMessage", "EnvelopeCodec", "InvalidEventError", "MAGIC_BYTE",
           "open_codec", "schema_id_of"]

MAGIC_BYTE = 0
#: Envelope attributes written on the wire, in schema order (``payload`` last).
ENVELOPE_FIELDS = (
    "event_id",
    "event_type",
    "event_version",
    "source",
    "tenant_id",
    "aggregate_type",
    "aggregate_id",
    "aggregate_version",
    "occurred_at",
    "published_at",
    "correlation_id",
    "causation_id",
    "traceparent",
    "actor_id",
    "payload",
)
#: What fastavro's reader raises on bytes that do not fit the writer schema (truncated: EOFError;
#: bad union/enum index: IndexError; bad UTF-8: UnicodeDecodeError, a ValueError; ...).
_DECODE_ERRORS = (
    IndexError,
    ValueError,
    TypeError,
    EOFError,
    KeyError,
    OverflowError,
    struct.error,
    SchemaResolutionError,
)
_ENCODE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, OverflowError)


class InvalidEventError(SchemaError):
    """An Envelope cannot be encoded: payload does not fit its schema, version < 1, wrong aggregate type."""


def schema_id_of(value: bytes) -> int | None:
    """Schema id of a Confluent-framed value, or None when it is not framed (diagnostics, DLQ tools)."""
    if value is None or len(value) < 5 or value[0] != MAGIC_BYTE:
        return None
    return int.from_bytes(value[1:5], "big")


def _poison(reason: str, message: str) -> PoisonMessageError:
    return PoisonMessageError(message, reason=reason)


@dataclass(slots=True, kw_only=True)
class _Writer:
    event_type: str
    version: int
    subject: str
    aggregate_type: str
    topic: str
    prefix: bytes  # 0x00 + schema id (4 bytes BE)
    schema: Any  # fastavro-parsed composed schema of (event_type, version)
    payload_schema: Any  # fastavro-parsed payload schema of the same version (encode validation)
    instants: bool  # the payload has instant (timestamp-*) fields: naive datetimes are looked for
    converts: bool  # values.conform may change a payload of this schema (else it is skipped)


@dataclass(slots=True, kw_only=True)
class _Reader:
    """How to read the values framed with one schema id.

    ``read`` reads as catalog version ``version`` (the schema the id stands for, or a catalog
    version with the same binary layout); a record whose ``event_version`` is another
    version is read again with the reader of that version (``by_version``), so one id
    standing for several catalog versions (a registry deduplicating by canonical form)
    decodes each as itself.
    """

    schema_id: int
    event_type: str
    version: int | None  # catalog version `read` reads as; None: a registry schema with no catalog twin
    newest: int  # newest catalog version of event_type
    read: Callable[[bytes, int], tuple[dict[str, Any], int]]  # (value, 5) -> (record, end)
    writer: Any  # the writer schema dict the id stands for
    layout: str  # its Parsing Canonical Form (the binary layout)
    by_version: dict[int, Callable[[bytes, int], tuple[dict[str, Any], int]]] = field(default_factory=dict)


def _layout(schema: Any) -> str:
    """Parsing Canonical Form (Avro 1.12 spec, "Parsing Canonical Form for Schemas"): two schemas
    with the same form have the same binary encoding (docs, aliases, defaults, logical types dropped)."""
    return to_parsing_canonical_form(parse_schema(dict(schema) if isinstance(schema, Mapping) else schema))


def _read_view(schema: Any) -> Any:
    """``schema`` without ``logicalType: uuid`` on strings, for reading (same binary encoding).

    fastavro maps a uuid string to ``uuid.UUID`` on read; :class:`Envelope` carries the text as
    written, and ``str(UUID(text))`` costs ~15 % of a decode. The logical type is an annotation
    on ``string`` (Avro 1.12 spec, "UUID"), so dropping it changes no byte that is read.
    """
    if isinstance(schema, list):
        return [_read_view(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    if schema.get("type") == "string" and schema.get("logicalType") == "uuid":
        return {k: v for k, v in schema.items() if k != "logicalType"}
    return {k: _read_view(v) if k in ("type", "fields", "items", "values") else v for k, v in schema.items()}


def _fastavro_reader(writer: Any, reader: Any = None) -> Callable[[bytes, int], tuple[dict[str, Any], int]]:
    """``read(value, start) -> (record, end offset)`` over ``schemaless_reader``; schemas parsed once."""
    writer = parse_schema(_read_view(writer))
    reader = parse_schema(_read_view(reader)) if reader is not None else None

    def read(value: bytes, start: int) -> tuple[dict[str, Any], int]:
        bio = BytesIO(value)
        bio.seek(start)
        return schemaless_reader(bio, writer, reader), bio.tell()

    return read


class EnvelopeCodec:
    """Encode/decode Envelopes for Kafka (fastavro underneath).

    Args:
        catalog: the loaded :class:`~casestream.events.catalog.Catalog`.
        registry: a :class:`~casestream.events.registry.SchemaRegistry` (real adapter or in-memory);
            the codec owns it from here: :meth:`close` (or ``with codec:``) closes it.
        upcasters: the :class:`~casestream.events.upcasting.UpcasterChain` (verified in :meth:`prepare`).

    Call :meth:`prepare` once at start-up before encode/decode. Thread-safe after
    :meth:`prepare` (caches only grow; a race fetches a schema twice at worst).
    """

    def __init__(self, catalog: Catalog, registry: SchemaRegistry, upcasters: UpcasterChain):
        self.catalog = catalog
        self.registry = registry
        self.upcasters = upcasters
        self._writers: dict[tuple[str, int], _Writer] = {}
        self._newest: dict[str, _Writer] = {}
        self._readers: dict[int, _Reader] = {}  # by schema id
        self._by_frame: dict[bytes, _Reader] = {}  # by the 5 frame bytes (0x00 + id): the hot-path cache
        self._local: dict[tuple[str, int], _Reader] = {}  # by (event_type, version): catalog schemas
        self._ids: dict[tuple[str, int], int] = {}
        self._eventwise: set[tuple[str, int]] = set()  # (type, version) whose chain meets an event step
        self._plain_reads: set[Any] = set()  # read functions that need no value repair (no resolution)
        self._prepared = False

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the registry adapter (its HTTP session); a no-op for a registry without ``close``.

        Cached schemas stay usable: decoding ids seen before still works, a new id then
        raises whatever the closed registry raises.
        """
        close = getattr(self.registry, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> EnvelopeCodec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- start-up --------------------------------------------------------------------------
    def prepare(self, *, auto_register: bool) -> dict[tuple[str, int], int]:
        """Resolve the schema id of every catalog (event type, version) and parse every schema.

        Args:
            auto_register: True (dev/test) registers missing schemas and sets each subject's
                compatibility level, like ``casestream schemas register`` (idempotent); False
                (production) only looks ids up and fails when one is missing.

        Returns:
            ``{(event_type, version): schema_id}``.

        Raises:
            UpcasterChainError: an upcaster step is missing (start-up, not on an old event).
            UnknownSchemaError: production mode and a schema is not registered
                (run ``casestream schemas register``).
            IncompatibleSchemaError / SchemaError: registration refused.
            RegistryUnavailable: the registry is down.
        """
        self.upcasters.verify(self.catalog)
        ids: dict[tuple[str, int], int] = {}
        if auto_register:  # the same steps as `casestream schemas register`, levels included
            for step in register_catalog(self.catalog, self.registry):
                if step.version is not None and step.schema_id is not None:
                    ids[(self.catalog.subjects[step.subject].event_type, step.version)] = step.schema_id
        for sv in self.catalog.iter_versions():
            key = (sv.event_type, sv.version)
            if key not in ids:
                try:
                    ids[key] = self.registry.lookup(sv.subject, sv.schema)
                except UnknownSchemaError as e:
                    raise UnknownSchemaError(
                        f"{sv.subject} v{sv.version} is not registered; run `casestream schemas register` ({e})"
                    ) from e
        for spec in self.catalog.subjects.values():
            for v in spec.versions:
                self._build(spec.event_type, v, ids[(spec.event_type, v)])
            self._newest[spec.event_type] = self._writers[(spec.event_type, spec.newest)]
        self._ids = ids
        self._prepared = True
        return dict(ids)

    def _build(self, event_type: str, version: int, schema_id: int) -> None:
        sv = self.catalog.version(event_type, version)
        spec = self.catalog.subject_for(event_type)
        parsed = parse_schema(dict(sv.schema))
        payload_schema = parse_schema(dict(sv.payload))
        self._writers[(event_type, version)] = _Writer(
            event_type=event_type,
            version=version,
            subject=spec.subject,
            aggregate_type=spec.aggregate_type,
            topic=spec.topic,
            prefix=bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big"),
            schema=parsed,
            payload_schema=payload_schema,
            instants=has_instants(payload_schema),
            converts=converts(payload_schema),
        )
        layout = _layout(sv.schema)
        local = self._local[(event_type, version)] = _Reader(
            schema_id=schema_id, event_type=event_type, version=version, newest=spec.newest,
            read=_fastavro_reader(sv.schema), writer=sv.schema, layout=layout,
        )
        shared = self._readers.get(schema_id)
        if shared is not None and shared.layout != layout:
            raise SchemaError(
                f"{spec.subject}: the registry gave v{shared.version} and v{version} the same schema id "
                f"{schema_id} although their binary layouts differ; it cannot tell their events apart")
        # Several catalog versions under one id (a registry deduplicating by canonical form):
        # the newest reads the frame; the envelope's event_version picks the version (decode).
        self._readers[schema_id] = _Reader(
            schema_id=schema_id, event_type=event_type, version=version, newest=spec.newest,
            read=local.read, writer=sv.schema, layout=layout,
        )
        if not self.upcasters.payload_only(event_type, version):
            self._eventwise.add((event_type, version))

    @property
    def schema_ids(self) -> Mapping[tuple[str, int], int]:
        """``{(event_type, version): schema_id}`` resolved by :meth:`prepare`."""
        return dict(self._ids)

    # -- producing side --------------------------------------------------------------------
    def _writer_for(self, env: Envelope) -> _Writer:
        v = env.event_version
        w = self._newest.get(env.event_type) if v is None else self._writers.get((env.event_type, v))
        if w is not None:
            return w
        if not self._prepared:
            raise SchemaError("EnvelopeCodec.prepare() was not called")
        spec = self.catalog.subject_for(env.event_type)  # raises UnknownSchemaError
        raise UnknownSchemaError(f"{spec.subject}: version {v} not in the catalog (known {list(spec.versions)})")

    def encode(self, env: Envelope) -> bytes:
        """Encode ``env`` as a Kafka message value: ``0x00 | schema id (4 bytes BE) | Avro binary``.

        ``env.event_version`` None means the newest catalog version; ``published_at`` is written
        as given (normally None: consumers take it from the Kafka timestamp).

        Raises:
            UnknownSchemaError: event type or version not in the catalog.
            InvalidEventError: aggregate_version < 1, aggregate type other than the subject's,
                the payload does not fit the version's schema, or a timestamp field holds a
                naive datetime (message names the field).
        """
        w = self._writer_for(env)
        if env.aggregate_version < 1:
            raise InvalidEventError(f"{w.subject}: aggregate_version must be >= 1, got {env.aggregate_version}")
        if env.aggregate_type != w.aggregate_type:
            raise InvalidEventError(
                f"{w.subject}: aggregate_type must be {w.aggregate_type!r}, got {env.aggregate_type!r}"
            )
        payload = env.payload
        if not validate(payload, w.payload_schema, raise_errors=False):  # int range, bool/float as int...
            raise self._explain(env, w, None)
        naive = naive_datetime(w.payload_schema, payload) if w.instants else None
        if naive is None and isinstance(env.published_at, datetime) and env.published_at.tzinfo is None:
            naive = "published_at"
        elif naive is not None:
            naive = f"payload.{naive}"
        if naive is not None:  # Avro timestamps are UTC instants; a naive datetime names none
            raise InvalidEventError(f"{w.subject} v{w.version}: event {env.event_id}: {naive}: "
                                    "datetime without a time zone (use an aware datetime, e.g. UTC)")
        rec = {
            "event_id": env.event_id,
            "event_type": w.event_type,
            "event_version": w.version,
            "source": env.source,
            "tenant_id": env.tenant_id,
            "aggregate_type": env.aggregate_type,
            "aggregate_id": env.aggregate_id,
            "aggregate_version": env.aggregate_version,
            "occurred_at": env.occurred_at,
            "published_at": env.published_at,
            "correlation_id": env.correlation_id,
            "causation_id": env.causation_id,
            "traceparent": env.traceparent,
            "actor_id": env.actor_id,
            "payload": payload,
        }
        out = BytesIO()
        out.write(w.prefix)
        try:
            schemaless_writer(out, w.schema, rec, strict_allow_default=True)
        except _ENCODE_ERRORS as e:
            raise self._explain(env, w, e) from e
        return out.getvalue()

    @staticmethod
    def _explain(env: Envelope, w: _Writer, cause: Exception | None) -> InvalidEventError:
        detail = str(cause) if cause is not None else "payload does not fit"
        try:
            validate(env.payload, w.payload_schema, raise_errors=True)
        except ValidationError as ve:
            detail = "; ".join(str(x) for x in ve.errors) or detail
        except Exception:  # noqa: BLE001 - best effort diagnostics only
            pass
        return InvalidEventError(f"{w.subject} v{w.version}: event {env.event_id} does not fit the schema: {detail}")

    def headers(self, env: Envelope) -> list[tuple[str, bytes]]:
        """Kafka headers: ``id``, ``type``, ``event_version``, ``traceparent`` (if set), ``correlation_id``.

        Values are UTF-8; ``event_version`` is the version actually written (newest when None).
        """
        v = env.event_version if env.event_version is not None else self._writer_for(env).version
        h = [("id", env.event_id.encode()), ("type", env.event_type.encode()), ("event_version", str(v).encode())]
        if env.traceparent is not None:
            h.append(("traceparent", env.traceparent.encode()))
        h.append(("correlation_id", env.correlation_id.encode()))
        return h

    def topic_for(self, env: Envelope) -> str:
        """Topic of ``env``: ``outbox.event.<aggregate_type>`` from the catalog. Raises UnknownSchemaError."""
        w = self._newest.get(env.event_type)
        return w.topic if w is not None else self.catalog.subject_for(env.event_type).topic

    @staticmethod
    def key_for(env: Envelope) -> bytes:
        """Message key: the aggregate id, UTF-8."""
        return env.aggregate_id.encode()

    # -- consuming side --------------------------------------------------------------------
    def decode(self, value: bytes, *, published_at: datetime | None = None) -> Envelope:
        """Decode a message value with its writer schema, validate, upcast to the newest version.

        For a message the upcasters turn into exactly one event; :meth:`decode_message` reads
        any message (zero or several events).

        Args:
            value: the Kafka message value.
            published_at: the Kafka message timestamp as an aware datetime; replaces the
                (normally null) ``published_at`` of the bytes when given.

        Returns:
            An :class:`~casestream.events.envelope.Envelope` with ``event_version`` = newest catalog
            version of its event type and a payload of that version.

        Raises:
            PoisonMessageError: see the module docstring for ``reason`` values; ``upcast`` also
                when the event upcasters make other than one event of it.
            RegistryUnavailable: an uncached schema id and the registry is down (retry later).
        """
        r, rec = self._read(value)
        if published_at is not None:
            rec["published_at"] = published_at
        key = (r.event_type, rec["event_version"])
        if key in self._eventwise:
            events = self._upcast_events(r, rec)
            if len(events) != 1:
                raise _poison("upcast", f"{r.event_type} {rec['event_id']}: the event upcasters make "
                                        f"{len(events)} events of it; read it with decode_message")
            return events[0]
        if rec["event_version"] != r.newest:
            rec["payload"], rec["event_version"] = self._upcast(r.event_type, rec["event_version"],
                                                                rec["payload"], r.newest, rec)
        return self._envelope(r, rec)

    def decode_message(self, value: bytes, *, published_at: datetime | None = None) -> DecodedMessage:
        """Decode a message value into the stored event and the events it stands for today.

        The consumer runtime, replay and dead-letter re-drive read messages with this, so the
        three paths yield the same events in the same order (``casestream.events.upcasting``).

        Returns:
            :class:`DecodedMessage` ``(source, events)``.

        Raises:
            PoisonMessageError / RegistryUnavailable: as :meth:`decode`.
        """
        r, rec = self._read(value)
        if published_at is not None:
            rec["published_at"] = published_at
        if (r.event_type, rec["event_version"]) in self._eventwise:
            source = self._envelope(r, dict(rec))
            return DecodedMessage(source, tuple(self._upcast_events(r, rec, source)))
        if rec["event_version"] != r.newest:
            rec["payload"], rec["event_version"] = self._upcast(r.event_type, rec["event_version"],
                                                                rec["payload"], r.newest, rec)
        env = self._envelope(r, rec)
        return DecodedMessage(env, (env,))

    def _read(self, value: bytes) -> tuple[_Reader, dict[str, Any]]:
        """The record of ``value`` read as the catalog version its envelope names (or as the
        newest, for a writer newer than the catalog), checked."""
        r = self._by_frame.get(value[:5]) if value is not None else None  # hot path: frame bytes -> reader
        if r is None:
            r = self._frame_miss(value)
        sid = r.schema_id
        n = len(value)
        try:
            rec, end = r.read(value, 5)
        except SchemaResolutionError as e:
            raise _poison("schema_resolution", f"schema id {sid} ({r.event_type}): the writer's "
                                               f"record does not resolve into the reader's: {e}") from e
        except _DECODE_ERRORS as e:
            raise _poison("avro_decode", f"schema id {sid} ({r.event_type}): Avro decode failed: {e!r}") from e
        ev = rec["event_version"]
        if ev != r.version:
            rec, end = self._reread(r, value, ev)
        if end != n:
            raise _poison("trailing_bytes", f"schema id {sid} ({r.event_type}): {n - end} bytes after the record")
        if rec["event_type"] != r.event_type:
            raise _poison("validation", f"schema id {sid}: event_type {rec['event_type']!r} != {r.event_type!r}")
        if rec["aggregate_version"] < 1:
            raise _poison("validation", f"{r.event_type} {rec['event_id']}: aggregate_version {rec['aggregate_version']} < 1")
        return r, rec

    def _reread(self, r: _Reader, value: bytes, ev: Any) -> tuple[dict[str, Any], int]:
        """Read ``value`` again as catalog version ``ev`` of ``r``'s event type (its envelope says
        so), or into the newest version when ``ev`` is newer than the catalog."""
        read = r.by_version.get(ev)
        if read is None:
            read = r.by_version[ev] = self._reader_as(r, ev)
        try:
            rec, end = read(value, 5)
        except PoisonMessageError:
            raise
        except SchemaResolutionError as e:
            # well-formed bytes of a writer whose field does not resolve into the reader's
            # (Avro specification, "Schema Resolution": a type change, an enum symbol the
            # reader lacks with no enum default): not corruption
            raise _poison("schema_resolution", f"schema id {r.schema_id} ({r.event_type} v{ev}): "
                                               f"the writer's record does not resolve into "
                                               f"v{min(ev, r.newest)}: {e}") from e
        except _DECODE_ERRORS as e:
            raise _poison("avro_decode", f"schema id {r.schema_id} ({r.event_type} v{ev}): "
                                         f"Avro decode failed: {e!r}") from e
        if ev > r.newest:
            rec["event_version"] = r.newest
        if read not in self._plain_reads:  # Avro resolution filled reader defaults: make them valid
            target = rec["event_version"]
            rec["payload"] = self._valid_as(r.event_type, target, rec["payload"],
                                            f"{rec['event_id']}: payload read as v{target}")
        return rec, end

    def _reader_as(self, r: _Reader, ev: Any) -> Callable[[bytes, int], tuple[dict[str, Any], int]]:
        """A read function for records of ``r``'s schema id whose envelope says version ``ev``.

        Same binary layout as the catalog's ``ev`` (or newest): read with the catalog's schema
        (its logical types); else Avro schema resolution from the id's schema into it.
        """
        if not isinstance(ev, int) or ev < 1:
            raise _poison("validation", f"schema id {r.schema_id} ({r.event_type}): event_version {ev!r} invalid")
        target = min(ev, r.newest)
        local = self._local.get((r.event_type, target))
        if local is None:
            raise _poison("validation", f"schema id {r.schema_id} ({r.event_type}): event_version {ev} invalid")
        if local.layout == r.layout:
            self._plain_reads.add(local.read)
            return local.read
        try:
            return _fastavro_reader(r.writer, local.writer)
        except Exception as e:  # noqa: BLE001 - fastavro raises several types for bad schemas
            raise _poison("schema_resolution", f"schema id {r.schema_id} ({r.event_type}) cannot be "
                                               f"read as v{target}: {e}") from e

    def _envelope(self, r: _Reader, rec: dict[str, Any]) -> Envelope:
        if (rec["event_id"] and rec["source"] and rec["tenant_id"] and rec["aggregate_type"]
                and rec["aggregate_id"] and rec["correlation_id"] and rec["actor_id"]):
            # Every record is read with (or resolved into) a catalog schema, which fixes each
            # envelope field's type (ids str, versions int, occurred_at an aware datetime); with
            # the ids non-empty and the versions checked, Envelope.__post_init__ has nothing to refuse.
            return envelope_from_trusted_record(rec)
        try:
            return Envelope(**rec)
        except (TypeError, ValueError) as e:
            raise _poison("validation", f"{r.event_type} {rec['event_id']}: {e}") from e

    def _frame_miss(self, value: bytes) -> _Reader:
        """Validate the Confluent frame of ``value`` and find (or fetch) its writer schema."""
        if not value:
            raise _poison("empty", "empty message value (tombstone?)")
        n = len(value)
        if n < 5:
            raise _poison("too_short", f"message value has {n} bytes; the Confluent frame needs >= 5")
        if value[0] != MAGIC_BYTE:
            raise _poison("bad_magic_byte", f"magic byte is {value[0]:#04x}, expected 0x00 (Confluent wire format)")
        sid = int.from_bytes(value[1:5], "big")
        r = self._readers.get(sid)
        if r is None:
            r = self._load_reader(sid)
        self._by_frame[bytes(value[:5])] = r
        return r

    def _upcast(self, event_type: str, ev: int, payload: Any, newest: int, rec: Mapping[str, Any]) -> tuple[Any, int]:
        try:
            reached, payload = self.upcasters.upcast(event_type, ev, payload)
        except Exception as e:  # noqa: BLE001 - any upcaster failure makes this message poison
            raise _poison("upcast", f"{event_type} {rec['event_id']}: upcast from v{ev} failed: {e!r}") from e
        if reached != newest:
            raise _poison("upcast", f"{event_type} {rec['event_id']}: upcast from v{ev} reached v{reached}, not v{newest}")
        return self._valid(event_type, payload, f"{rec['event_id']}: payload upcast v{ev}->v{newest}"), newest

    def _valid(self, event_type: str, payload: Any, what: str) -> Any:
        """``payload`` made what the newest schema of ``event_type`` promises (values.conform),
        or poison (reason ``validation``, naming the field)."""
        return self._valid_as(event_type, self._newest[event_type].version, payload, what)

    def _valid_as(self, event_type: str, version: int, payload: Any, what: str) -> Any:
        """``payload`` made what version ``version``'s schema promises, or poison naming the field."""
        w = self._writers[(event_type, version)]
        schema = w.payload_schema
        if w.converts:
            payload = conform(schema, payload)
        try:
            validate(payload, schema, raise_errors=True)
        except ValidationError as e:
            fields = "; ".join(f"{x.field}: {x.datum!r} is not {x.schema}" for x in e.errors
                               if hasattr(x, "field")) or str(e.errors)
            raise _poison("validation", f"{event_type} {what} invalid: {fields}") from e
        return payload

    def _upcast_events(self, r: _Reader, rec: dict[str, Any], source: Envelope | None = None) -> list[Envelope]:
        """The event upcasters' results for ``rec``, each checked against its newest schema."""
        if source is None:
            source = self._envelope(r, rec)
        try:
            events = self.upcasters.upcast_event(source)
        except Exception as e:  # noqa: BLE001 - any upcaster failure makes this message poison
            raise _poison("upcast", f"{r.event_type} {rec['event_id']}: upcast from v{rec['event_version']} "
                                    f"failed: {e}") from e
        out = []
        for e in events:
            w = self._newest.get(e.event_type)
            if w is None or e.event_version != w.version:
                raise _poison("upcast", f"{r.event_type} {rec['event_id']}: upcasters made {e.event_type} "
                                        f"v{e.event_version}, not a newest catalog version")
            payload = self._valid(e.event_type, e.payload, f"{e.event_id} (upcast from {r.event_type} "
                                                           f"v{rec['event_version']})")
            out.append(e if payload is e.payload else replace(e, payload=payload))
        return out

    def _load_reader(self, sid: int) -> _Reader:
        """Fetch an unknown writer schema from the registry, cache a reader for it."""
        try:
            schema = self.registry.get_schema(sid)
        except UnknownSchemaError as e:
            raise _poison("unknown_schema_id", f"schema id {sid} is not in the registry: {e}") from e
        name = schema.get("name", "") if isinstance(schema, dict) else ""
        ns = schema.get("namespace") if isinstance(schema, dict) else None
        subject = name if "." in name or not ns else f"{ns}.{name}"
        spec = self.catalog.subjects.get(subject)
        if spec is None or spec.event_type not in self._newest:
            raise _poison("unknown_subject", f"schema id {sid} is {subject or 'not a record'}, not in the catalog")
        try:
            layout = _layout(schema)
            twins = [v for v in spec.versions if self._local[(spec.event_type, v)].layout == layout]
            # Same layout as catalog versions (registered under another id, or another text):
            # read as the newest of them; the envelope's event_version picks the version.
            read = self._local[(spec.event_type, twins[-1])].read if twins else _fastavro_reader(schema)
        except Exception as e:  # noqa: BLE001 - fastavro raises several types for bad schemas
            raise _poison("schema_resolution", f"schema id {sid} ({subject}) does not parse: {e}") from e
        r = _Reader(schema_id=sid, event_type=spec.event_type, version=twins[-1] if twins else None,
                    newest=spec.newest, read=read, writer=schema, layout=layout)
        self._readers[sid] = r
        return r


def open_codec(catalog: Catalog, registry: str | SchemaRegistry, *,
               auto_register: bool | None) -> EnvelopeCodec:
    """The one way to open an :class:`EnvelopeCodec`: over ``catalog`` with the catalog's own
    upcaster chain (:meth:`Catalog.upcaster_chain`, ``[catalog] upcasters``).

    Args:
        catalog: the loaded catalog (one folder or several merged).
        registry: a Confluent-API registry base URL (a
            :class:`~casestream.events.registry.ConfluentSchemaRegistry` is opened on it) or
            a :class:`~casestream.events.registry.SchemaRegistry` (e.g. ``InMemoryRegistry``).
        auto_register: True registers missing schemas (development, tests), False only looks
            ids up (production), both via :meth:`EnvelopeCodec.prepare`; None does not
            prepare (a reader that decodes by the ids on the wire, e.g. dead-letter tools).

    The caller closes it (``codec.close()`` or ``with``); on a failed prepare it is closed here.

    Raises:
        ConfigError / CatalogError: the catalog's upcasters reference does not resolve.
        UpcasterChainError, UnknownSchemaError, SchemaError, RegistryUnavailable: see
            :meth:`EnvelopeCodec.prepare`.
    """
    chain = catalog.upcaster_chain()
    if isinstance(registry, str):
        from casestream.events.registry import ConfluentSchemaRegistry

        registry = ConfluentSchemaRegistry(registry)
    codec = EnvelopeCodec(catalog, registry, chain)
    if auto_register is not None:
        try:
            codec.prepare(auto_register=auto_register)
        except BaseException:
            codec.close()
            raise
    return codec
