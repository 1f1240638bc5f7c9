"""Schema identity and resolved values, in memory: decoding follows the envelope's event version
(one registry id may stand for several catalog versions), registration reports a folded
version, resolved values are what the newest schema promises, naive datetimes are refused."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from casestream.errors import PoisonMessageError, SchemaError
from casestream.events import EnvelopeCodec, InMemoryRegistry, InvalidEventError, UpcasterChain, load_catalog
from casestream.events.registry import register_catalog
from tests.support.evolution import (
    NOTED,
    FoldingRegistry,
    fill_defaults,
    thing_catalog,
    thing_event,
    thing_upcasters,
    write_catalog,
)


def test_versions_sharing_one_registry_id_each_decode_as_themselves(tmp_path: Path) -> None:
    catalog = load_catalog(thing_catalog(tmp_path, "unitfold"))
    registry = FoldingRegistry()
    steps = register_catalog(catalog, registry)
    noted = [s for s in steps if s.version and s.subject.endswith("ThingNoted")]
    assert [s.action for s in noted] == ["registered", "shared", "shared", "shared", "registered"]
    assert "registry version 1" in noted[1].detail and "checks later versions" in noted[1].detail
    codec = EnvelopeCodec(catalog, registry, thing_upcasters())
    ids = codec.prepare(auto_register=False)
    assert len({ids[("ThingNoted", v)] for v in (1, 2, 3, 4)}) == 1  # one id, four versions
    for v, payload in NOTED.items():
        env = codec.decode(codec.encode(thing_event("ThingNoted", payload, version=v)))
        assert (env.event_version, dict(env.payload)) == (5, payload)


def test_a_reader_fetching_a_folded_id_reads_every_version_it_stands_for(tmp_path: Path) -> None:
    catalog = load_catalog(thing_catalog(tmp_path, "unitfetch"))
    registry = FoldingRegistry()
    producer = EnvelopeCodec(catalog, registry, thing_upcasters())
    producer.prepare(auto_register=True)
    values = [producer.encode(thing_event("ThingNoted", p, version=v)) for v, p in NOTED.items()]
    other = InMemoryRegistry(first_id=900)  # another environment: other ids for the same schemas
    consumer = EnvelopeCodec(catalog, other, thing_upcasters())
    consumer.prepare(auto_register=True)
    other._by_id.update(registry._by_id)  # the wire ids resolve in the consumer's registry
    assert [consumer.decode(v).payload["note"] for v in values] == ["v1", "v2", "v3", "v4", "v5"]


def _payload(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "ItemPayload", "namespace": "unitval.thing", "fields": fields}


BASE = [{"name": "name", "type": "string"}]
OLD_EXTRA = [
    {"name": "blob", "type": "bytes", "default": "\u00ff\u0001"},
    {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}, "default": "ab"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1500},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 2},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"},
     "default": "B"},
]


def _codecs(tmp_path: Path) -> tuple[EnvelopeCodec, EnvelopeCodec]:
    """(producer on v2, consumer on v1): v2 dropped every defaulted field and added symbol Z."""
    v1 = _payload(BASE + OLD_EXTRA)
    v2 = _payload(BASE + [{"name": "kind", "type": {"type": "enum", "name": "Kind",
                                                     "symbols": ["A", "B", "Z"], "default": "A"}}])
    registry = InMemoryRegistry()
    chain = UpcasterChain()
    chain.add("Item", 1, lambda p: fill_defaults(p, v2))
    producer = EnvelopeCodec(load_catalog(write_catalog(tmp_path / "p", "unitval", {"Item": [v1, v2]},
                                                        compatibility="NONE")), registry, chain)
    producer.prepare(auto_register=True)
    consumer = EnvelopeCodec(load_catalog(write_catalog(tmp_path / "c", "unitval", {"Item": [v1]},
                                                        compatibility="NONE")), registry, UpcasterChain())
    consumer.prepare(auto_register=False)
    return producer, consumer


def test_a_newer_writer_resolves_into_valid_values_of_the_newest_known_schema(tmp_path: Path) -> None:
    producer, consumer = _codecs(tmp_path)
    env = consumer.decode(producer.encode(thing_event("Item", {"name": "n", "kind": "Z"}, version=2)))
    assert env.event_version == 1
    assert dict(env.payload) == {"name": "n", "blob": b"\xff\x01", "tag": b"ab",
                                 "at": datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=UTC),
                                 "day": datetime(1970, 1, 3).date(), "kind": "A"}
    assert consumer.decode(consumer.encode(env)) == env  # valid values: it re-encodes


def test_an_upcaster_result_that_cannot_be_made_valid_is_poison_naming_the_field(tmp_path: Path) -> None:
    producer, _consumer = _codecs(tmp_path)
    chain = UpcasterChain()
    chain.add("Item", 1, lambda p: {**p, "kind": "NOPE"})
    broken = EnvelopeCodec(producer.catalog, producer.registry, chain)
    broken.prepare(auto_register=False)
    old = thing_event("Item", {"name": "n", "blob": b"x", "tag": b"ab", "at": datetime.now(UTC),
                               "day": datetime(2026, 1, 1).date(), "kind": "B"}, version=1)
    with pytest.raises(PoisonMessageError, match=r"unitval\.thing\.ItemPayload\.kind") as e:
        broken.decode(producer.encode(old))
    assert e.value.reason == "validation"


def test_a_naive_datetime_is_refused_at_encode_naming_the_field(tmp_path: Path) -> None:
    _producer, consumer = _codecs(tmp_path)
    payload = {"name": "n", "blob": b"x", "tag": b"ab", "at": datetime(2026, 1, 1, 12, 0),
               "day": datetime(2026, 1, 1).date(), "kind": "B"}
    with pytest.raises(InvalidEventError, match=r"payload\.at: datetime without a time zone"):
        consumer.encode(thing_event("Item", payload, version=1))
    payload["at"] = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert consumer.decode(consumer.encode(thing_event("Item", payload, version=1))).payload["at"] == payload["at"]


class _OneIdRegistry(InMemoryRegistry):
    """A broken registry answering every lookup with id 1."""

    def lookup(self, subject: str, schema: Any) -> int:
        return 1


def test_a_registry_giving_one_id_to_different_layouts_is_refused_at_start_up(tmp_path: Path) -> None:
    catalog = load_catalog(thing_catalog(tmp_path, "unitone"))
    with pytest.raises(SchemaError, match="same schema id 1 although their binary layouts differ"):
        EnvelopeCodec(catalog, _OneIdRegistry(), thing_upcasters()).prepare(auto_register=False)
