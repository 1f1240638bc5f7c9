"""Unit tests of casestream.events.codec (EnvelopeCodec over fastavro), with the in-memory registry."""

from __future__ import annotations

import io
import random
import string
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from casestream.events.catalog import load_catalog
from casestream.events.codec import ENVELOPE_FIELDS, EnvelopeCodec, InvalidEventError, schema_id_of
from casestream.events.envelope import Envelope, new_event
from casestream.errors import PoisonMessageError, RegistryUnavailable, UnknownSchemaError, UpcasterChainError
from casestream.events.registry import InMemoryRegistry
from casestream_suite_schemas.upcasters import (
    default_upcasters,
    evidence_overdue_v1_v2,
    evidence_requested_v1_v2,
    register_notice_upcasters,
    register_saga_upcasters,
)
from casestream.events.upcasting import UpcasterChain
from services import schemas_dir
from casestream.events import open_codec

CATALOG = load_catalog(schemas_dir())
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def example(schema: Any, rnd: random.Random, named: dict[str, Any] | None = None) -> Any:
    """A random value fitting ``schema`` (JSON form; named types resolved through ``named``)."""
    named = {} if named is None else named
    if isinstance(schema, list):
        return example(rnd.choice(schema), rnd, named)
    if isinstance(schema, str):
        schema = named.get(schema, {"type": schema})
    t = schema["type"]
    if isinstance(t, (dict, list)):
        return example(t, rnd, named)
    if t == "record":
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
        return {f["name"]: example(f["type"], rnd, named) for f in schema["fields"]}
    if t == "enum":
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
        return rnd.choice(schema["symbols"])
    if t == "string":
        n = rnd.choice([0, 1, 5, 63, 64, 200])
        return "".join(rnd.choice(string.ascii_letters + "äé€ \n") for _ in range(n))
    if t == "int":
        return rnd.choice([0, 1, -1, 63, 64, -65, 2**31 - 1, -(2**31)])
    if t == "long":
        if schema.get("logicalType") == "timestamp-micros":
            return datetime(2026, 1, 2, 3, 4, 5, rnd.randrange(10**6), tzinfo=UTC)
        return rnd.choice([0, 1, -1, 2**40, -(2**63), 2**63 - 1])
    if t == "null":
        return None
    raise AssertionError(f"no example for {t}")


def make_env(event_type: str, version: int | None = None, *, seed: int = 1, **over: Any) -> Envelope:
    spec = CATALOG.subject_for(event_type)
    payload = example(dict(CATALOG.version(event_type, version).payload), random.Random(seed))
    fields = dict(
        event_type=event_type, aggregate_type=spec.aggregate_type, aggregate_id="agg-1", aggregate_version=3,
        payload=payload, tenant_id="tenant-1", source=spec.source, actor_id="user-1", correlation_id="case-1",
        causation_id="cause-1", traceparent=TRACEPARENT, event_version=version,
        occurred_at=datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC),
    )
    fields.update(over)
    return new_event(**fields)


@pytest.fixture
def codec() -> EnvelopeCodec:
    c = open_codec(CATALOG, InMemoryRegistry(), auto_register=None)
    c.prepare(auto_register=True)
    return c


def as_newest(env: Envelope) -> Envelope:
    return replace(env, event_version=CATALOG.newest_version(env.event_type))


#: Event types an event upcaster turns into others on decode (see test_upcasting_events.py).
UPCAST_AWAY = {t for t, _v in CATALOG.upcaster_chain().event_steps()}


@pytest.mark.parametrize("event_type", sorted(set(CATALOG.event_types) - UPCAST_AWAY))
def test_round_trip_every_event_type(codec: EnvelopeCodec, event_type: str) -> None:
    for seed in range(5):
        env = make_env(event_type, seed=seed)
        value = codec.encode(env)
        assert value[0] == 0 and schema_id_of(value) == codec.schema_ids[(event_type, CATALOG.newest_version(event_type))]
        assert codec.decode(value) == as_newest(env)


def test_round_trip_with_nulls_and_published_at(codec: EnvelopeCodec) -> None:
    env = make_env("CaseClosed", causation_id=None, traceparent=None, payload={"outcome": "no_violation",
                                                                                "penalty_cents": None})
    published = datetime(2026, 3, 4, 5, 6, 8, tzinfo=UTC)
    out = codec.decode(codec.encode(env), published_at=published)
    assert out == replace(as_newest(env), published_at=published)


def test_bytes_are_raw_fastavro_of_the_version_schema(codec: EnvelopeCodec) -> None:
    """Differential: the codec's Avro bytes equal plain fastavro's for every catalog version, and read back."""
    rnd = random.Random(7)
    for sv in CATALOG.iter_versions():
        parsed = parse_schema(dict(sv.schema))
        for seed in range(10):
            env = make_env(sv.event_type, sv.version, seed=seed + rnd.randrange(1000))
            value = codec.encode(env)
            rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": sv.version}
            ref = io.BytesIO()
            schemaless_writer(ref, parsed, rec)
            assert value[5:] == ref.getvalue(), (sv.event_type, sv.version)
            raw = schemaless_reader(io.BytesIO(value[5:]), parsed, None)
            assert raw["payload"] == env.payload
            assert str(raw["event_id"]) == env.event_id


def test_encode_takes_defaults_for_missing_payload_fields(codec: EnvelopeCodec) -> None:
    env = make_env("CaseOpened", payload={"title": "t", "summary": "s", "severity": 1, "evidence_count": 0,
                                          "reporter_email": "r"})
    assert codec.decode(codec.encode(env)).payload["priority"] == "NORMAL"


def test_decoded_event_id_is_a_str(codec: EnvelopeCodec) -> None:
    env = make_env("CaseReturned")
    out = codec.decode(codec.encode(env))
    assert type(out.event_id) is str and out.event_id == env.event_id


def test_decode_upcasts_old_versions_to_newest(codec: EnvelopeCodec) -> None:
    v1 = make_env("CaseOpened", 1, payload={"title": "T", "description": " a  b ", "severity": 5,
                                            "evidence_count": 2, "reporter_email": "r@example.org"})
    out = codec.decode(codec.encode(v1))
    assert out.event_version == 3
    assert out.payload == {"title": "T", "summary": "a b", "severity": 5, "evidence_count": 2,
                           "reporter_email": "r@example.org", "priority": "NORMAL"}
    v2 = make_env("CaseOpened", 2, payload={**v1.payload, "priority": "LOW"})
    assert codec.decode(codec.encode(v2)).payload["priority"] == "LOW"
    assert [h for h in codec.headers(v1) if h[0] == "event_version"] == [("event_version", b"1")]


def test_headers_topic_and_key(codec: EnvelopeCodec) -> None:
    env = make_env("NoticeIssued", 1)
    assert codec.headers(env) == [
        ("id", env.event_id.encode()), ("type", b"NoticeIssued"), ("event_version", b"1"),
        ("traceparent", TRACEPARENT.encode()), ("correlation_id", b"case-1"),
    ]
    assert [k for k, _ in codec.headers(replace(env, traceparent=None))] == ["id", "type", "event_version",
                                                                            "correlation_id"]
    assert codec.topic_for(env) == "outbox.event.notice"
    assert codec.key_for(env) == b"agg-1"


# -- poison ------------------------------------------------------------------------------------

def _reason(codec: EnvelopeCodec, value: bytes) -> str:
    with pytest.raises(PoisonMessageError) as e:
        codec.decode(value)
    return e.value.reason


def test_poison_framing(codec: EnvelopeCodec) -> None:
    good = codec.encode(make_env("CaseSubmitted"))
    assert _reason(codec, b"") == "empty"
    assert _reason(codec, b"\x00\x00\x01") == "too_short"
    assert _reason(codec, b"\x01" + good[1:]) == "bad_magic_byte"
    assert _reason(codec, b"{\"json\": true}") == "bad_magic_byte"
    assert _reason(codec, b"\x00\x00\x00\x03\xe7" + good[5:]) == "unknown_schema_id"
    assert _reason(codec, good[:-3]) == "avro_decode"
    assert _reason(codec, good[:5]) == "avro_decode"
    assert _reason(codec, good + b"\x00") == "trailing_bytes"


def test_poison_bad_utf8_and_enum_index(codec: EnvelopeCodec) -> None:
    env = make_env("CaseOpened", payload={"title": "T", "summary": "s", "severity": 1, "evidence_count": 0,
                                          "reporter_email": "r", "priority": "HIGH"})
    good = codec.encode(env)
    assert _reason(codec, good[:-1] + b"\x06") == "avro_decode"  # enum index 3 of 3 symbols
    i = good.index(b"tenant-1")
    assert _reason(codec, good[:i] + b"\xff" + good[i + 1:]) == "avro_decode"


def _reframe(codec: EnvelopeCodec, event_type: str, version: int, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(CATALOG.schema(event_type, version)), record)
    return b"\x00" + codec.schema_ids[(event_type, version)].to_bytes(4, "big") + buf.getvalue()


def test_poison_validation(codec: EnvelopeCodec) -> None:
    env = make_env("DecisionFailed")
    rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": 1}
    assert _reason(codec, _reframe(codec, "DecisionFailed", 1, rec | {"aggregate_version": 0})) == "validation"
    assert _reason(codec, _reframe(codec, "DecisionFailed", 1, rec | {"event_version": 0})) == "validation"
    assert _reason(codec, _reframe(codec, "DecisionFailed", 1, rec | {"event_version": -3})) == "validation"
    # A newer producer's v2 with v1's layout under v1's id (a registry deduplicating by
    # canonical form): read as the newest version this catalog knows.
    assert codec.decode(_reframe(codec, "DecisionFailed", 1, rec | {"event_version": 2})).event_version == 1
    assert _reason(codec, _reframe(codec, "DecisionFailed", 1, rec | {"event_type": "NoticeFailed"})) == "validation"
    assert _reason(codec, _reframe(codec, "DecisionFailed", 1, rec | {"tenant_id": ""})) == "validation"


def test_poison_when_an_upcaster_fails() -> None:
    chain = UpcasterChain()
    chain.add("CaseOpened", 1, lambda p: {**p, "priority": "NORMAL"})

    def broken(p: Any) -> dict[str, Any]:
        raise KeyError("description")

    chain.add("CaseOpened", 2, broken)
    chain.add("EvidenceRequested", 1, evidence_requested_v1_v2)
    chain.add("EvidenceOverdue", 1, evidence_overdue_v1_v2)
    register_notice_upcasters(register_saga_upcasters(chain))
    codec = EnvelopeCodec(CATALOG, InMemoryRegistry(), chain)
    codec.prepare(auto_register=True)
    assert _reason(codec, codec.encode(make_env("CaseOpened", 1))) == "upcast"


def test_poison_when_an_upcaster_produces_an_invalid_payload() -> None:
    chain = UpcasterChain()
    chain.add("CaseOpened", 1, lambda p: {**p, "priority": "NORMAL"})
    chain.add("CaseOpened", 2, lambda p: dict(p))  # forgets the rename
    chain.add("EvidenceRequested", 1, evidence_requested_v1_v2)
    chain.add("EvidenceOverdue", 1, evidence_overdue_v1_v2)
    register_notice_upcasters(register_saga_upcasters(chain))
    codec = EnvelopeCodec(CATALOG, InMemoryRegistry(), chain)
    codec.prepare(auto_register=True)
    assert _reason(codec, codec.encode(make_env("CaseOpened", 2))) == "validation"


# -- registry interplay ------------------------------------------------------------------------

def test_writer_schema_fetched_by_id_and_cached() -> None:
    registry = InMemoryRegistry()
    producer = open_codec(CATALOG, registry, auto_register=None)
    producer.prepare(auto_register=True)
    # the consumer's registry view: same schemas under other ids (e.g. a registry restored elsewhere)
    consumer_registry = InMemoryRegistry(first_id=100)
    consumer = open_codec(CATALOG, consumer_registry, auto_register=None)
    consumer.prepare(auto_register=True)
    for (et, v), sid in producer.schema_ids.items():
        consumer_registry.add_schema(sid, CATALOG.schema(et, v), subject=CATALOG.subject_for(et).subject)
    value = producer.encode(make_env("CaseOpened", 1))
    assert consumer.decode(value).event_version == 3
    calls = consumer_registry.calls.get("get_schema", 0)
    consumer.decode(value)
    assert consumer_registry.calls["get_schema"] == calls == 1


def test_newer_writer_version_is_resolved_into_the_newest_known() -> None:
    """A producer already on CaseSubmitted v2 (adds an optional field) while this consumer knows v1."""
    registry = InMemoryRegistry()
    codec = open_codec(CATALOG, registry, auto_register=None)
    codec.prepare(auto_register=True)
    v2 = CATALOG.schema("CaseSubmitted")
    v2["fields"][-1]["type"]["fields"].append({"name": "channel", "type": ["null", "string"], "default": None})
    sid = registry.register("casestream.case.CaseSubmitted", v2)
    env = make_env("CaseSubmitted")
    rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": 2}
    rec["payload"] = {**env.payload, "channel": "web"}
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(v2), rec)
    out = codec.decode(b"\x00" + sid.to_bytes(4, "big") + buf.getvalue())
    assert out.event_version == 1 and out.payload == env.payload


def test_a_writer_the_reader_cannot_resolve_is_schema_resolution_not_corrupt_bytes() -> None:
    """A producer on a newer version whose field no longer resolves into the reader's (Avro
    1.11 "Schema Resolution": a type change, an enum symbol without reader default) sent
    well-formed bytes: the class is ``schema_resolution``; the same bytes cut short stay
    ``avro_decode``."""
    registry = InMemoryRegistry()
    codec = open_codec(CATALOG, registry, auto_register=None)
    codec.prepare(auto_register=True)
    newest = CATALOG.newest_version("CaseSubmitted")
    writer = CATALOG.schema("CaseSubmitted")
    fields = writer["fields"][-1]["type"]["fields"]
    changed = next(f for f in fields if f["type"] == "string")
    changed["type"] = "boolean"
    sid = registry.register("casestream.case.CaseSubmitted", writer)
    env = make_env("CaseSubmitted")
    rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": newest + 1}
    rec["payload"] = {**env.payload, changed["name"]: True}
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(writer), rec)
    value = b"\x00" + sid.to_bytes(4, "big") + buf.getvalue()
    with pytest.raises(PoisonMessageError) as e:
        codec.decode(value)
    assert e.value.reason == "schema_resolution", e.value
    assert f"schema id {sid}" in str(e.value)
    assert _reason(codec, value[:7]) == "avro_decode"


def test_foreign_subject_is_poison() -> None:
    registry = InMemoryRegistry()
    codec = open_codec(CATALOG, registry, auto_register=None)
    codec.prepare(auto_register=True)
    sid = registry.register("other.Thing", {"type": "record", "name": "other.Thing", "fields": []})
    assert _reason(codec, b"\x00" + sid.to_bytes(4, "big") + b"\x00") == "unknown_subject"


def test_registry_down_on_unknown_id_is_not_poison() -> None:
    registry = InMemoryRegistry()
    codec = open_codec(CATALOG, registry, auto_register=None)
    codec.prepare(auto_register=True)
    good = codec.encode(make_env("CaseReturned"))
    registry.available = False
    assert codec.decode(good).event_type == "CaseReturned"  # known ids need no registry
    with pytest.raises(RegistryUnavailable):
        codec.decode(b"\x00\x00\x00\x00\x63" + good[5:])


def test_production_mode_only_looks_up() -> None:
    registry = InMemoryRegistry()
    with pytest.raises(UnknownSchemaError, match="casestream schemas register"):
        open_codec(CATALOG, registry, auto_register=None).prepare(auto_register=False)
    assert registry.calls.get("register", 0) == 0
    open_codec(CATALOG, registry, auto_register=None).prepare(auto_register=True)
    registered = registry.calls["register"]
    ids = open_codec(CATALOG, registry, auto_register=None).prepare(auto_register=False)
    assert registry.calls["register"] == registered
    assert len(ids) == sum(len(s.versions) for s in CATALOG.subjects.values())


def test_prepare_fails_at_start_up_on_a_missing_upcaster() -> None:
    with pytest.raises(UpcasterChainError):
        EnvelopeCodec(CATALOG, InMemoryRegistry(), UpcasterChain()).prepare(auto_register=True)


# -- encode errors -----------------------------------------------------------------------------

def test_encode_errors(codec: EnvelopeCodec) -> None:
    with pytest.raises(InvalidEventError, match="severity"):
        codec.encode(make_env("CaseSubmitted", payload={"title": "t", "severity": "high", "evidence_count": 1,
                                                         "reporter_email": "r", "submitted_by": "u"}))
    with pytest.raises(InvalidEventError, match="CaseSubmitted"):
        codec.encode(make_env("CaseSubmitted", payload={"title": "t"}))
    with pytest.raises(InvalidEventError, match="sumary"):
        codec.encode(make_env("CaseOpened", payload={"title": "t", "sumary": "s", "summary": "s", "severity": 1,
                                                      "evidence_count": 0, "reporter_email": "r"}))
    with pytest.raises(InvalidEventError, match="aggregate_type"):
        codec.encode(make_env("CaseSubmitted", aggregate_type="saga"))
    with pytest.raises(UnknownSchemaError):
        codec.encode(make_env("CaseSubmitted", event_version=4))
    with pytest.raises(UnknownSchemaError):
        codec.encode(replace(make_env("CaseSubmitted"), event_type="Nope"))


@pytest.mark.parametrize(("field", "value"), [
    ("severity", 2**31), ("severity", -(2**31) - 1), ("severity", True), ("severity", 1.0), ("evidence_count", None),
    ("priority", "URGENT"), ("title", None), ("title", b"bytes"),
])
def test_encode_refuses_payload_values_fastavro_would_write(codec: EnvelopeCodec, field: str, value: Any) -> None:
    """fastavro's writer alone would write an int out of 32-bit range or a bool as int; validation refuses."""
    payload = {"title": "t", "summary": "s", "severity": 2, "evidence_count": 0, "reporter_email": "r",
               "priority": "NORMAL", field: value}
    with pytest.raises(InvalidEventError, match=field):
        codec.encode(make_env("CaseOpened", payload=payload))


@pytest.mark.parametrize("over", [
    {"aggregate_version": 2**63}, {"causation_id": 5}, {"traceparent": b"x"}, {"published_at": "2026-01-01"},
    {"payload": ["not", "a", "record"]},
])
def test_encode_refuses_envelope_values_that_do_not_fit(codec: EnvelopeCodec, over: dict[str, Any]) -> None:
    with pytest.raises(InvalidEventError, match="SagaCompleted"):
        codec.encode(replace(make_env("SagaCompleted"), **over))


def test_unprepared_codec_refuses() -> None:
    codec = open_codec(CATALOG, InMemoryRegistry(), auto_register=None)
    with pytest.raises(Exception, match="prepare"):
        codec.encode(make_env("CaseReturned"))


def test_naive_and_old_timestamps(codec: EnvelopeCodec) -> None:
    early = datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    env = make_env("SagaCompleted", occurred_at=early)
    assert codec.decode(codec.encode(env)).occurred_at == early
    later = early + timedelta(days=365 * 200)
    assert codec.decode(codec.encode(replace(env, occurred_at=later))).occurred_at == later


def test_none_value_is_poison(codec: EnvelopeCodec) -> None:
    with pytest.raises(PoisonMessageError) as e:
        codec.decode(None)  # type: ignore[arg-type]
    assert e.value.reason == "empty"


class _ClosingRegistry(InMemoryRegistry):
    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_close_closes_the_registry_and_keeps_cached_schemas() -> None:
    registry = _ClosingRegistry()
    with open_codec(CATALOG, registry, auto_register=None) as codec:
        codec.prepare(auto_register=True)
        value = codec.encode(make_env("NoticeFailed"))
    assert registry.closed == 1
    assert codec.decode(value).event_type == "NoticeFailed"
    open_codec(CATALOG, InMemoryRegistry(), auto_register=None).close()  # no close() on the registry: no-op
