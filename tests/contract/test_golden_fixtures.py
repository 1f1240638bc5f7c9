"""Golden fixtures: every historical version's stored message decodes with its writer schema and upcasts.

The ``fixtures/*.avro`` files were written once by ``fixtures/make_fixtures.py`` and are never
rewritten; if a version file is edited in a way that changes the binary layout, or an upcaster
changes behaviour, these tests fail.
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader
from fastavro.validation import validate

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.registry import InMemoryRegistry
from casestream_suite_schemas.upcasters import SUMMARY_MAX, default_upcasters
from services import schemas_dir
from casestream.events import open_codec

HERE = Path(__file__).parent / "fixtures"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
CATALOG = load_catalog(schemas_dir())


def _codec() -> EnvelopeCodec:
    registry = InMemoryRegistry(first_id=5000)
    for m in MANIFEST.values():
        registry.add_schema(m["schema_id"], CATALOG.schema(m["event_type"], m["version"]), subject=m["subject"])
    codec = open_codec(CATALOG, registry, auto_register=None)
    codec.prepare(auto_register=False)
    return codec


def test_one_fixture_per_catalog_version() -> None:
    have = {(m["event_type"], m["version"]) for m in MANIFEST.values()}
    want = {(sv.event_type, sv.version) for sv in CATALOG.iter_versions()}
    assert have == want, "run tests/contract/fixtures/make_fixtures.py after adding a version"
    assert {p.name for p in HERE.glob("*.avro")} == set(MANIFEST)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_decodes_upcasts_and_validates(name: str) -> None:
    m = MANIFEST[name]
    value = (HERE / name).read_bytes()
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == m["schema_id"]
    env = _codec().decode(value)
    newest = CATALOG.version(m["event_type"])
    assert env.event_version == newest.version
    assert validate(dict(env.payload), parse_schema(dict(newest.payload)), raise_errors=True)
    expected = dict(m["expected"])
    for k in ("occurred_at", "published_at"):
        expected[k] = datetime.fromisoformat(expected[k]) if expected[k] else None
    actual = {k: getattr(env, k) for k in expected}
    actual["payload"] = {k: v.isoformat() if isinstance(v, datetime) else v  # timestamp-millis
                         for k, v in env.payload.items()}
    assert actual == expected


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_reads_with_plain_fastavro_and_its_version_file(name: str) -> None:
    """No casestream code on the reading side: the bytes are Avro of the composed schema of that version."""
    m = MANIFEST[name]
    value = (HERE / name).read_bytes()
    buf = io.BytesIO(value[5:])
    rec = schemaless_reader(buf, parse_schema(CATALOG.schema(m["event_type"], m["version"])), None)
    assert buf.tell() == len(value) - 5
    assert rec["event_type"] == m["event_type"] and rec["event_version"] == m["version"]
    assert rec["published_at"] is None


def test_case_opened_v1_upcast_contract() -> None:
    env = _codec().decode((HERE / "casestream.case.CaseOpened.v1.avro").read_bytes())
    assert env.payload["priority"] == "NORMAL"
    assert len(env.payload["summary"]) == SUMMARY_MAX
    assert "  " not in env.payload["summary"] and "\t" not in env.payload["summary"]
    assert "description" not in env.payload
