"""Contract of the schemas folder and the wire format: parsers, names, envelope, framing, headers."""

from __future__ import annotations

import dataclasses
import json

import avro.schema
import pytest
from fastavro import parse_schema

from casestream.events.catalog import load_catalog, schema_text
from casestream.events.codec import ENVELOPE_FIELDS, EnvelopeCodec
from casestream.events.envelope import Envelope, new_event
from casestream.events.registry import InMemoryRegistry
from casestream.schemacheck import check_catalog, lint_schema
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec

CATALOG = load_catalog(schemas_dir())


@pytest.mark.parametrize("sv", list(CATALOG.iter_versions()), ids=lambda sv: f"{sv.event_type}.v{sv.version}")
def test_composed_schema_parses_with_both_parsers_and_is_lint_clean(sv) -> None:  # noqa: ANN001
    text = schema_text(sv.schema)
    parse_schema(json.loads(text))
    parsed = avro.schema.parse(text)
    assert parsed.fullname == sv.subject
    assert lint_schema(sv.payload) == []


def test_the_project_catalog_passes_its_own_check() -> None:
    report = check_catalog(schemas_dir())
    assert report.exit_code == 0, [f.to_dict() for f in report.findings]
    assert report.findings == []


def test_envelope_schema_matches_the_envelope_dataclass() -> None:
    avro_fields = [f["name"] for f in CATALOG.envelope["fields"]] + ["payload"]
    assert tuple(avro_fields) == ENVELOPE_FIELDS
    assert set(avro_fields) == {f.name for f in dataclasses.fields(Envelope)}
    types = {f["name"]: f["type"] for f in CATALOG.envelope["fields"]}
    assert types["occurred_at"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert types["published_at"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert types["aggregate_version"] == "long" and types["event_version"] == "int"
    for optional in ("causation_id", "traceparent"):
        assert types[optional] == ["null", "string"]


def test_wire_format_and_headers() -> None:
    registry = InMemoryRegistry(first_id=0x01020304)
    codec = open_codec(CATALOG, registry, auto_register=None)
    ids = codec.prepare(auto_register=True)
    env = new_event(event_type="SagaCompleted", aggregate_type="saga", aggregate_id="s-1", aggregate_version=4,
                    payload={"case_id": "c-1", "outcome": "violation"}, tenant_id="t", source="saga",
                    actor_id="saga", correlation_id="c-1", traceparent="00-abc-def-01")
    value = codec.encode(env)
    assert value[0] == 0
    assert value[1:5] == ids[("SagaCompleted", 1)].to_bytes(4, "big")
    assert dict(codec.headers(env)) == {"id": env.event_id.encode(), "type": b"SagaCompleted",
                                         "event_version": b"1", "traceparent": b"00-abc-def-01",
                                         "correlation_id": b"c-1"}
    assert codec.topic_for(env) == "outbox.event.saga"


def test_schema_files_are_what_the_catalog_names() -> None:
    root = schemas_dir()
    on_disk = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.avsc"))
    named = sorted([sv.path for sv in CATALOG.iter_versions()] + [CATALOG.envelope_path])
    assert on_disk == named
