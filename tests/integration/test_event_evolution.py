"""Event evolution on the real registry, Kafka and PostgreSQL.

* ``schemas register`` stores catalog versions that differ only in docs, an enum default or
  an alias as distinct registry versions (Apicurio's Confluent API folds them), so the
  enum-evolution recipe (v3 adds the default, v5 the symbol, FULL) registers.
* A registry that folded those versions (one id for v1..v4, as registering through the
  Confluent API alone leaves it): old and new events of every version are consumed live,
  re-driven from the dead-letter topic, held behind a version gap and drained, and rebuilt by
  replay — with a legacy event split by an event upcaster into two typed events, the same
  events with the same ids on every path.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from casestream.cli.schemas import schemas
from casestream.handlers import HandlerRegistry
from casestream.events import ConfluentSchemaRegistry, EnvelopeCodec, derived_event_id, load_catalog, same_schema
from casestream.consumer.deadletters import redrive
from casestream.handlers import ProjectionSpec
from casestream.replay.engine import Replayer, ReplayOptions
from casestream.retry import RetryPolicy
from casestream.testing.consumer import EffectsProjection, Harness, create_topic, produce_events, wait_until
from tests.integration.test_registry import delete_subjects
from tests.support.evolution import NOTED, thing_catalog, thing_event, thing_upcasters

HANDLED = ("ThingNoted", "ThingFlagged")


@pytest.fixture
def namespace(registry_url: str) -> Iterator[str]:
    ns = f"itevo{uuid.uuid4().hex[:10]}"
    yield ns
    delete_subjects(registry_url, ns + ".")


def test_register_keeps_doc_default_and_alias_only_versions_distinct(
        tmp_path: Path, namespace: str, registry_url: str) -> None:
    folder = thing_catalog(tmp_path / "schemas", namespace, compatibility="FULL")
    catalog = load_catalog(folder)
    args = ["register", "--schemas-dir", str(folder), "--registry", registry_url]
    first = CliRunner().invoke(schemas, args)
    assert first.exit_code == 0, first.output
    subject = catalog.subject_for("ThingNoted").subject
    with ConfluentSchemaRegistry(registry_url, max_retries=1) as reg:
        registered = reg.versions(subject)
    assert [r.version for r in registered] == [1, 2, 3, 4, 5]
    assert len({r.schema_id for r in registered}) == 5
    for r in registered:
        assert same_schema(r.schema, catalog.version("ThingNoted", r.version).schema)
    again = CliRunner().invoke(schemas, args)
    assert again.exit_code == 0 and "registered" not in again.output.replace("unchanged", ""), again.output
    codec = EnvelopeCodec(catalog, ConfluentSchemaRegistry(registry_url), thing_upcasters())
    with codec:
        ids = codec.prepare(auto_register=False)
        assert ids[("ThingNoted", 2)] == registered[1].schema_id  # the exact version, not a twin
        for v, payload in NOTED.items():
            env = codec.decode(codec.encode(thing_event("ThingNoted", payload, version=v)))
            assert (env.event_version, dict(env.payload)) == (5, payload)


def _register_folded(registry_url: str, catalog: Any) -> None:
    """Register every version through the Confluent API alone: Apicurio folds ThingNoted v2..v4
    (docs, enum default, alias) into v1's id."""
    with ConfluentSchemaRegistry(registry_url, max_retries=1) as reg:
        for sv in catalog.iter_versions():
            reg.register(sv.subject, sv.schema)
            reg.set_compatibility(sv.subject, "NONE")  # v5 is checked against v1 here
        assert len(reg.versions(catalog.subject_for("ThingNoted").subject)) == 2


def _spec(h: Harness) -> ProjectionSpec:
    table = h.projection.table
    return ProjectionSpec(
        name=f"evo.{h.name}", description="evolution test projection", topics=(h.topic,),
        live_consumer=h.name, tables=(table,), dsn=lambda: h.dsn,
        create_tables=lambda conn, names: conn.execute(EffectsProjection(names[table]).ddl()),
        registry=lambda names, _types: EffectsProjection(names[table]).register(HandlerRegistry(), HANDLED),
        freshness=lambda _conn, _names: None)


def _by_aggregate(rows: list[tuple[str, str, int]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for event_id, aggregate_id, _v in rows:
        out.setdefault(aggregate_id, []).append(event_id)
    return out


def test_every_version_and_a_split_legacy_event_decode_live_redriven_and_replayed(
        tmp_path: Path, namespace: str, registry_url: str, kafka_bootstrap: str, pg_url: str) -> None:
    catalog = load_catalog(thing_catalog(tmp_path / "schemas", namespace))
    _register_folded(registry_url, catalog)
    codec = EnvelopeCodec(catalog, ConfluentSchemaRegistry(registry_url), thing_upcasters())
    ids = codec.prepare(auto_register=False)
    assert len({ids[("ThingNoted", v)] for v in (1, 2, 3, 4)}) == 1  # one id, four versions
    h = Harness.create(kafka_bootstrap, pg_url, codec=codec, registry_url=registry_url, prefix="test.evolution")
    try:
        create_topic(kafka_bootstrap, h.topic, 1)
        noted = [thing_event("ThingNoted", p, version=v) for v, p in NOTED.items()]
        legacy = thing_event("ThingUpdated", {"note": "old", "flag": "red"}, version=1, aggregate_id="L")
        after = thing_event("ThingNoted", NOTED[5], version=5, aggregate_id="L", aggregate_version=2)
        dead_old = thing_event("ThingNoted", NOTED[1], version=1, aggregate_id="D")
        dead_split = thing_event("ThingUpdated", {"note": "x", "flag": "y"}, version=1, aggregate_id="S")
        # held behind a gap, then drained: a split legacy event at G v2 arrives before G v1
        held_split = thing_event("ThingUpdated", {"note": "g", "flag": "h"}, version=1, aggregate_id="G",
                                 aggregate_version=2)
        gap_filler = thing_event("ThingNoted", NOTED[3], version=3, aggregate_id="G")
        h.projection.fail = {dead_old.event_id: 10**6, derived_event_id(dead_split.event_id, 1): 10**6}
        rt = h.start(h.runtime(h.settings(retry=RetryPolicy(max_attempts=2, initial_delay_s=0.05,
                                                             max_delay_s=0.1)),
                               registry=h.projection.register(HandlerRegistry(), HANDLED)))
        produce_events(kafka_bootstrap, h.topic, codec, [*noted, legacy, after, held_split, dead_old, dead_split])
        wait_until(lambda: rt.stats.held == 1)
        produce_events(kafka_bootstrap, h.topic, codec, [gap_filler])  # a later batch fills the gap
        dead = h.dead_letters(2)
        wait_until(lambda: len(h.rows()) >= 11)
        assert {dict(d.headers)["id"] for d in dead} == {dead_old.event_id.encode(), dead_split.event_id.encode()}
        h.projection.fail.clear()  # the fix is deployed
        assert redrive(kafka_bootstrap, dead, f"{h.name}.redrive") == 2
        wait_until(lambda: len(h.rows()) == 14)
        live = _by_aggregate(h.rows())
        want = {e.aggregate_id: [e.event_id] for e in [*noted, dead_old]}
        want["L"] = [legacy.event_id, derived_event_id(legacy.event_id, 1), after.event_id]
        want["S"] = [dead_split.event_id, derived_event_id(dead_split.event_id, 1)]
        want["G"] = [gap_filler.event_id, held_split.event_id, derived_event_id(held_split.event_id, 1)]
        assert live == want
        assert rt.stats.stale == 0 and rt.stats.held == 1 and rt.stats.drained == 1
        assert h.guard("L") == ("flowing", 2) and h.guard("G") == ("flowing", 2)
        h.stop(rt)

        result = Replayer(_spec(h), codec=codec, dsn=h.dsn, bootstrap=kafka_bootstrap,
                          event_types=HANDLED).run(ReplayOptions(batch_size=50))
        # G's history is out of order on the topic (v2 before v1): replay applies the gap and
        # skips the late v1 as stale (casestream.replay.applier); everything else is as live.
        assert (result.poison, result.stale, result.gaps) == (0, 1, 1)
        with psycopg.connect(h.dsn) as conn:
            replayed = _by_aggregate(h.projection.rows(conn))
        assert replayed == {**want, "G": want["G"][1:]}
    finally:
        h.close()
        codec.close()
