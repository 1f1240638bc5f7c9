"""Property: for random sequences of compatible schema versions, an event written with any
version is decoded by a consumer on any version — never a poison message for a compatible pair.

Each generated step is FULL-compatible with every earlier version (Avro 1.12 specification,
"Schema Resolution"): docs, aliases, a field added with a default, a defaulted field removed,
an enum symbol added (the enum has a default from the start). Writers use every version;
consumers know versions 1..j (payload upcasters fill defaults), so they read older writers
through upcasting and newer ones through resolution, over a registry that either keeps each
version distinct or folds versions equal up to docs, aliases and enum defaults (as Apicurio's
Confluent API does). Decoded values must re-encode (they are what the schema promises).
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casestream.events import EnvelopeCodec, InMemoryRegistry, UpcasterChain, load_catalog
from tests.support.evolution import T0, FoldingRegistry, fill_defaults, thing_event, write_catalog

NS = "propthing"
FIELD_TYPES: list[tuple[Any, Any, Any]] = [  # (type, JSON default, a written value)
    ("string", "d", "w"),
    ("long", 7, 11),
    ("bytes", "\u00e9\u0001", b"\x02"),
    (["null", "string"], None, "x"),
    ({"type": "long", "logicalType": "timestamp-millis"}, 0, None),
    ({"type": "fixed", "name": "Pair", "size": 2}, "zz", b"ab"),
]


def _base() -> dict[str, Any]:
    return {"type": "record", "name": "ItemPayload", "namespace": f"{NS}.thing", "fields": [
        {"name": "id", "type": "string"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"},
         "default": "A"}]}


def _evolve(schema: dict[str, Any], op: int, n: int) -> dict[str, Any]:
    s = copy.deepcopy(schema)
    fields = s["fields"]
    extra = [f for f in fields if f["name"].startswith("f")]
    kind = next(f for f in fields if f["name"] == "kind")
    if op == 0:
        s["doc"] = f"doc {n}"
    elif op == 1:
        fields[0]["aliases"] = [f"id{n}"]
    elif op == 2 and not any(isinstance(f["type"], dict) and f["type"].get("type") == "fixed" for f in fields):
        t, default, _ = FIELD_TYPES[n % len(FIELD_TYPES)]
        fields.append({"name": f"f{n}", "type": copy.deepcopy(t), "default": default})
    elif op == 2:
        fields.append({"name": f"f{n}", "type": "string", "default": "s"})
    elif op == 3 and extra:
        fields.remove(extra[n % len(extra)])
    else:
        kind["type"]["symbols"] = [*kind["type"]["symbols"], f"S{n}"]
    return s


def _value(schema: dict[str, Any], seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f"i{seed}", "kind": schema["fields"][1]["type"]["symbols"][-1]}
    written = {repr(t): w for t, _d, w in FIELD_TYPES}
    for f in schema["fields"][2:]:
        w = written.get(repr(f["type"]), "s")
        out[f["name"]] = w if w is not None else T0
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=4),
       folding=st.booleans())
def test_no_compatible_pair_is_ever_dead_lettered(ops: list[int], folding: bool) -> None:
    versions = [_base()]
    for n, op in enumerate(ops, start=1):
        versions.append(_evolve(versions[-1], op, n))
    registry = FoldingRegistry() if folding else InMemoryRegistry()
    with tempfile.TemporaryDirectory() as tmp:
        codecs = []
        for j in range(1, len(versions) + 1):  # the consumer on version j (j = last: the producer)
            chain = UpcasterChain()
            for v in range(1, j):
                chain.add("Item", v, lambda p, nxt=versions[v]: fill_defaults(p, nxt))
            catalog = load_catalog(write_catalog(Path(tmp) / f"v{j}", NS, {"Item": versions[:j]},
                                                 compatibility="FULL_TRANSITIVE"))
            codec = EnvelopeCodec(catalog, registry, chain)
            codec.prepare(auto_register=True)
            codecs.append(codec)
        producer = codecs[-1]
        for i, schema in enumerate(versions, start=1):
            value = producer.encode(thing_event("Item", _value(schema, i), version=i))
            for j, consumer in enumerate(codecs, start=1):
                env = consumer.decode(value)  # raises PoisonMessageError on a dead letter
                assert env.event_version == j and env.payload["id"] == f"i{i}"
                assert consumer.decode(consumer.encode(env)) == env
