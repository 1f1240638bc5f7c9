"""Decoded envelopes of catalog schemas are built without re-running ``Envelope.__post_init__``
(``envelope_from_trusted_record``): the result must equal the checked constructor's, and a
value that fails the codec's own checks must still be poison naming the field."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from casestream.events.catalog import load_catalog
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import Envelope, envelope_from_trusted_record
from casestream.errors import PoisonMessageError
from casestream.events.registry import InMemoryRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from tests.unit.test_codec import ENVELOPE_FIELDS, make_env
from services import schemas_dir
from casestream.events import open_codec

CATALOG = load_catalog(schemas_dir())


def _write(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


@pytest.fixture
def codec() -> EnvelopeCodec:
    c = open_codec(CATALOG, InMemoryRegistry(), auto_register=None)
    c.prepare(auto_register=True)
    return c


def test_trusted_constructor_equals_the_checked_one() -> None:
    env = make_env("CaseReturned")
    rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS}
    rec["published_at"] = None
    built = envelope_from_trusted_record(rec)
    assert built == Envelope(**rec) and hash(repr(built)) == hash(repr(Envelope(**rec)))
    with pytest.raises(KeyError):
        envelope_from_trusted_record({k: v for k, v in rec.items() if k != "actor_id"})


def test_empty_ids_still_name_the_field(codec: EnvelopeCodec) -> None:
    env = make_env("NoticeFailed")
    for name in ("event_id", "source", "tenant_id", "aggregate_id", "correlation_id", "actor_id"):
        rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": 1, name: ""}
        value = b"\x00" + codec.schema_ids[("NoticeFailed", 1)].to_bytes(4, "big") + _write(
            CATALOG.schema("NoticeFailed", 1), rec)
        with pytest.raises(PoisonMessageError, match=name) as e:
            codec.decode(value)
        assert e.value.reason == "validation"
