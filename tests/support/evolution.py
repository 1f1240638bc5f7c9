"""Small schema catalogs written on the fly, for the event-evolution tests (no tests here).

``thing_catalog(root, namespace)`` writes a catalog whose ``ThingNoted`` subject has five
versions that differ in exactly one harmless way each (the registry-identity cases), plus a
legacy ``ThingUpdated`` that an event upcaster splits into ``ThingNoted`` and ``ThingFlagged``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from casestream.events import Envelope, InMemoryRegistry, UpcasterChain
from services import schemas_dir

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _kind(symbols: list[str], default: str | None = None) -> dict[str, Any]:
    kind: dict[str, Any] = {"type": "enum", "name": "Kind", "symbols": symbols}
    if default is not None:
        kind["default"] = default
    return kind


def thing_noted_versions(namespace: str) -> dict[int, dict[str, Any]]:
    """ThingNoted v1..v5 payload schemas: v2 adds docs only, v3 an enum default only, v4 a field
    alias only, v5 an enum symbol (the enum-evolution recipe: default first, symbol after)."""
    ns = f"{namespace}.thing"
    v1 = {"type": "record", "name": "ThingNotedPayload", "namespace": ns,
          "fields": [{"name": "note", "type": "string"}, {"name": "kind", "type": _kind(["A", "B"])}]}
    v2 = copy.deepcopy(v1)
    v2["doc"] = "Payload of ThingNoted v2: a thing was noted."
    v2["fields"][0]["doc"] = "What was noted."
    v3 = copy.deepcopy(v2)
    v3["fields"][1]["type"] = _kind(["A", "B"], default="A")
    v4 = copy.deepcopy(v3)
    v4["fields"][0]["aliases"] = ["remark"]
    v5 = copy.deepcopy(v4)
    v5["fields"][1]["type"] = _kind(["A", "B", "C"], default="A")
    return {1: v1, 2: v2, 3: v3, 4: v4, 5: v5}


def thing_catalog(root: Path, namespace: str, *, topic: str = "outbox.event.thing",
                  compatibility: str = "FULL") -> Path:
    """Write the catalog under ``root`` (created) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "thing").mkdir(exist_ok=True)
    shutil.copy(schemas_dir() / "envelope.avsc", root / "envelope.avsc")
    ns = f"{namespace}.thing"
    for v, payload in thing_noted_versions(namespace).items():
        (root / "thing" / f"ThingNoted.v{v}.avsc").write_text(json.dumps(payload, indent=1))
    (root / "thing" / "ThingFlagged.v1.avsc").write_text(json.dumps(
        {"type": "record", "name": "ThingFlaggedPayload", "namespace": ns,
         "fields": [{"name": "flag", "type": "string"}]}))
    (root / "thing" / "ThingUpdated.v1.avsc").write_text(json.dumps(
        {"type": "record", "name": "ThingUpdatedPayload", "namespace": ns,
         "fields": [{"name": "note", "type": ["null", "string"], "default": None},
                    {"name": "flag", "type": ["null", "string"], "default": None}]}))

    def subject(event_type: str, versions: list[int], level: str) -> str:
        return (f'[subjects."{ns}.{event_type}"]\nevent_type = "{event_type}"\naggregate_type = "thing"\n'
                f'topic = "{topic}"\nowner = "thing"\nsource = "thing"\ncompatibility = "{level}"\n'
                f"versions = {versions}\n\n")

    (root / "catalog.toml").write_text(
        f'[catalog]\nenvelope = "envelope.avsc"\nnamespace = "{namespace}"\n'
        f'upcasters = "tests.support.evolution:thing_upcasters"\n\n'
        + subject("ThingNoted", [1, 2, 3, 4, 5], compatibility)
        + subject("ThingFlagged", [1], "FULL_TRANSITIVE")
        + subject("ThingUpdated", [1], "FULL_TRANSITIVE"))
    return root


def split_thing_updated(event: Envelope) -> Iterator[Envelope]:
    """ThingUpdated v1 -> ThingNoted v1 (when ``note`` is set), then ThingFlagged v1 (``flag``)."""
    p = event.payload
    if p.get("note") is not None:
        yield dataclasses.replace(event, event_type="ThingNoted", event_version=1,
                                  payload={"note": p["note"], "kind": "B"})
    if p.get("flag") is not None:
        yield dataclasses.replace(event, event_type="ThingFlagged", event_version=1,
                                  payload={"flag": p["flag"]}, causation_id=event.event_id)


def thing_upcasters() -> UpcasterChain:
    """ThingNoted v1..v4 -> v5 (payloads are unchanged: every step is harmless), the split."""
    chain = UpcasterChain()
    for v in range(1, 5):
        chain.add("ThingNoted", v, dict)
    chain.add_event("ThingUpdated", 1, split_thing_updated,
                    produces=[("ThingNoted", 1), ("ThingFlagged", 1)])
    return chain


def thing_event(event_type: str, payload: Mapping[str, Any], *, version: int, aggregate_id: str | None = None,
                aggregate_version: int = 1, tenant: str = "tenant-1") -> Envelope:
    """An envelope of the thing catalog (event id random, occurred at :data:`T0`)."""
    agg = aggregate_id or str(uuid.uuid4())
    return Envelope(event_id=str(uuid.uuid4()), event_type=event_type, event_version=version,
                    source="thing", tenant_id=tenant, aggregate_type="thing", aggregate_id=agg,
                    aggregate_version=aggregate_version, occurred_at=T0, correlation_id=agg,
                    actor_id="tester", payload=dict(payload))


#: One sample payload per ThingNoted version (each valid for its version).
NOTED = {1: {"note": "v1", "kind": "A"}, 2: {"note": "v2", "kind": "B"}, 3: {"note": "v3", "kind": "A"},
         4: {"note": "v4", "kind": "B"}, 5: {"note": "v5", "kind": "C"}}


def write_catalog(root: Path, namespace: str, subjects: Mapping[str, list[dict[str, Any]]], *,
                  aggregate_type: str = "thing", compatibility: str = "FULL") -> Path:
    """A catalog under ``root``: ``subjects`` maps event type -> payload schemas of v1, v2, ..."""
    root.mkdir(parents=True, exist_ok=True)
    (root / aggregate_type).mkdir(exist_ok=True)
    shutil.copy(schemas_dir() / "envelope.avsc", root / "envelope.avsc")
    toml = f'[catalog]\nenvelope = "envelope.avsc"\nnamespace = "{namespace}"\n\n'
    for event_type, payloads in subjects.items():
        for v, payload in enumerate(payloads, start=1):
            (root / aggregate_type / f"{event_type}.v{v}.avsc").write_text(json.dumps(payload))
        toml += (f'[subjects."{namespace}.{aggregate_type}.{event_type}"]\nevent_type = "{event_type}"\n'
                 f'aggregate_type = "{aggregate_type}"\ntopic = "outbox.event.{aggregate_type}"\n'
                 f'owner = "t"\nsource = "t"\ncompatibility = "{compatibility}"\n'
                 f"versions = {list(range(1, len(payloads) + 1))}\n\n")
    (root / "catalog.toml").write_text(toml)
    return root


def _apicurio_canonical(schema: Any) -> Any:
    """Apicurio's Avro canonical form, roughly: docs, aliases and enum defaults dropped."""
    if isinstance(schema, list):
        return [_apicurio_canonical(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: _apicurio_canonical(v) for k, v in schema.items() if k not in ("doc", "aliases")}
    if schema.get("type") == "enum":
        out.pop("default", None)
    return out


class FoldingRegistry(InMemoryRegistry):
    """An in-memory registry that, like Apicurio's Confluent API, answers a schema equal to a
    registered one up to docs, aliases and enum defaults with the registered one's id."""

    @staticmethod
    def _key(schema: Mapping[str, Any]) -> str:
        return json.dumps(_apicurio_canonical(schema), sort_keys=True, separators=(",", ":"))

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        new = self._key(schema) not in self._ids
        sid = super().register(subject, schema)
        if new:  # the first text registered is the one served, as Apicurio does
            self._by_id[sid] = json.loads(json.dumps(schema))
        return sid


def fill_defaults(payload: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A payload upcaster to ``schema``: its fields, missing ones at their (JSON) defaults."""
    return {f["name"]: payload[f["name"]] if f["name"] in payload else copy.deepcopy(f.get("default"))
            for f in schema["fields"]}
