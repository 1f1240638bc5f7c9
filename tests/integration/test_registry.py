"""Integration tests of the registry adapter, registration and the schema check against the real registry.

Every test works on its own copy of the catalog under a unique namespace (``itest<hex>``), so
subjects never collide with the suite's own (``casestream.*``) or with other runs; the subjects
it creates are deleted afterwards.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from casestream.events.catalog import Catalog, load_catalog, same_schema
from casestream.cli.schemas import schemas
from casestream.events.codec import EnvelopeCodec
from casestream.events.envelope import new_event
from casestream.errors import IncompatibleSchemaError, RegistryUnavailable, SchemaError, UnknownSchemaError
from casestream.events.registry import ConfluentSchemaRegistry, register_catalog
from casestream_suite_schemas.upcasters import default_upcasters
from services import schemas_dir
from casestream.events import open_codec


def isolated_schemas(dst: Path, namespace: str) -> Path:
    """Copy schemas/ to ``dst`` with every ``casestream.`` name moved to ``namespace``."""
    shutil.copytree(schemas_dir(), dst)
    for p in [*dst.rglob("*.avsc"), dst / "catalog.toml"]:
        p.write_text(p.read_text().replace('"casestream.', f'"{namespace}.'))
    toml = dst / "catalog.toml"
    toml.write_text(toml.read_text().replace('namespace = "casestream"', f'namespace = "{namespace}"'))
    return dst


def delete_subjects(url: str, prefix: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with SchemaRegistryClient({"url": url}) as client:
        for s in client.get_subjects():
            if s.startswith(prefix):
                client.delete_subject(s)
                client.delete_subject(s, permanent=True)


@pytest.fixture
def namespace(registry_url: str) -> Iterator[str]:
    ns = f"itest{uuid.uuid4().hex[:10]}"
    yield ns
    delete_subjects(registry_url, ns + ".")


@pytest.fixture
def tree(tmp_path: Path, namespace: str) -> Path:
    return isolated_schemas(tmp_path / "schemas", namespace)


@pytest.fixture
def catalog(tree: Path) -> Catalog:
    return load_catalog(tree)


@pytest.fixture
def registry(registry_url: str) -> Iterator[ConfluentSchemaRegistry]:
    reg = ConfluentSchemaRegistry(registry_url, max_retries=1)
    yield reg
    reg.close()


def test_register_lookup_get_and_compatibility(catalog: Catalog, registry: ConfluentSchemaRegistry) -> None:
    sv = catalog.version("CaseSubmitted", 1)
    with pytest.raises(UnknownSchemaError):
        registry.lookup(sv.subject, sv.schema)
    assert registry.versions(sv.subject) == []
    sid = registry.register(sv.subject, sv.schema)
    assert registry.register(sv.subject, sv.schema) == sid  # idempotent: no new version
    with ConfluentSchemaRegistry(registry.url) as fresh:  # no client-side cache
        assert fresh.lookup(sv.subject, sv.schema) == sid
    assert same_schema(registry.get_schema(sid), sv.schema)  # Apicurio drops redundant nested namespaces
    assert [(v.version, v.schema_id) for v in registry.versions(sv.subject)] == [(1, sid)]
    registry.set_compatibility(sv.subject, "FULL_TRANSITIVE")
    assert registry.get_compatibility(sv.subject) == "FULL_TRANSITIVE"
    assert sv.subject in registry.subjects()


def test_registry_enforces_the_level_and_rejects_invalid(catalog: Catalog, registry: ConfluentSchemaRegistry) -> None:
    sv = catalog.version("SagaCompleted", 1)
    registry.register(sv.subject, sv.schema)
    registry.set_compatibility(sv.subject, "BACKWARD")
    breaking = catalog.schema("SagaCompleted")
    breaking["fields"][-1]["type"]["fields"].append({"name": "region", "type": "string"})
    with pytest.raises(IncompatibleSchemaError, match=sv.subject):
        registry.register(sv.subject, breaking)
    with pytest.raises(SchemaError):
        registry.register(sv.subject, {"type": "record", "name": "Bad", "fields": [{"name": "a", "type": "strnig"}]})


def test_unknown_id_and_registry_down(registry: ConfluentSchemaRegistry) -> None:
    with pytest.raises(UnknownSchemaError):
        registry.get_schema(2_000_000_000)
    with ConfluentSchemaRegistry("http://127.0.0.1:9/apis/ccompat/v7", timeout=2, max_retries=0) as down:
        with pytest.raises(RegistryUnavailable, match="127.0.0.1:9"):
            down.subjects()


def test_register_catalog_is_idempotent(catalog: Catalog, registry: ConfluentSchemaRegistry) -> None:
    first = register_catalog(catalog, registry)
    assert sum(s.action == "registered" for s in first) == len(list(catalog.iter_versions()))
    again = register_catalog(catalog, registry)
    assert {s.action for s in again} == {"unchanged", "compatibility-ok"}
    assert [s.schema_id for s in first if s.version] == [s.schema_id for s in again if s.version]
    subject = catalog.subject_for("CaseOpened").subject
    assert [v.version for v in registry.versions(subject)] == [1, 2, 3]
    assert registry.get_compatibility(subject) == "BACKWARD_TRANSITIVE"


def test_production_codec_only_looks_up(catalog: Catalog, registry: ConfluentSchemaRegistry) -> None:
    with pytest.raises(UnknownSchemaError, match="schemas register"):
        open_codec(catalog, registry, auto_register=None).prepare(auto_register=False)
    assert not [s for s in registry.subjects() if s.startswith(catalog.namespace + ".")]
    ids = dict(open_codec(catalog, registry, auto_register=None).prepare(auto_register=True))
    prod = open_codec(catalog, registry, auto_register=None)
    assert prod.prepare(auto_register=False) == ids
    env = new_event(event_type="CaseReturned", aggregate_type="case", aggregate_id="c-1", aggregate_version=2,
                    payload={"reason": "r"}, tenant_id="t", source="case", actor_id="a", correlation_id="c-1")
    assert prod.decode(prod.encode(env)).payload == {"reason": "r"}


def test_consumer_fetches_unknown_writer_ids_from_the_registry(catalog: Catalog, registry_url: str) -> None:
    with ConfluentSchemaRegistry(registry_url) as a, ConfluentSchemaRegistry(registry_url) as b:
        _fetch_by_id(catalog, a, b)


def _fetch_by_id(catalog: Catalog, producer_registry: ConfluentSchemaRegistry,
                 consumer_registry: ConfluentSchemaRegistry) -> None:
    producer = open_codec(catalog, producer_registry, auto_register=None)
    producer.prepare(auto_register=True)
    v1 = new_event(event_type="CaseOpened", event_version=1, aggregate_type="case", aggregate_id="c-9",
                   aggregate_version=1, payload={"title": "t", "description": " a  b ", "severity": 1,
                                                 "evidence_count": 0, "reporter_email": "r@example.org"},
                   tenant_id="t", source="case", actor_id="a", correlation_id="c-9")
    value = producer.encode(v1)
    consumer = open_codec(catalog, consumer_registry, auto_register=None)
    consumer.prepare(auto_register=False)
    consumer._readers.clear()  # noqa: SLF001 - force the by-id fetch path
    consumer._by_frame.clear()  # noqa: SLF001
    out = consumer.decode(value)
    assert out.event_version == 3 and out.payload["summary"] == "a b" and out.payload["priority"] == "NORMAL"


# -- the CLI against the live registry ----------------------------------------------------------

def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(schemas, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_register_then_check_against_the_registry(tree: Path, registry_url: str, namespace: str) -> None:
    versions, subjects = len(list(load_catalog(tree).iter_versions())), len(load_catalog(tree).subjects)
    code, out, err = run("register", "--schemas-dir", str(tree), "--registry", registry_url)
    assert code == 0, (out, err)
    assert f"{versions} registered" in out and f"{subjects} compatibility-set" in out
    code, out, _ = run("register", "--schemas-dir", str(tree), "--registry", registry_url)
    assert code == 0 and f"{versions} unchanged" in out and f"{subjects} compatibility-ok" in out
    code, out, err = run("check", "--schemas-dir", str(tree), "--registry", registry_url, "--format", "json")
    assert code == 0, (out, err)
    assert json.loads(out)["findings"] == []
    # a new, breaking version in the working tree: reported against the registered history
    v4 = json.loads((tree / "case" / "CaseOpened.v3.avsc").read_text())
    v4["fields"].append({"name": "region", "type": "string"})
    (tree / "case" / "CaseOpened.v4.avsc").write_text(json.dumps(v4))
    toml = tree / "catalog.toml"
    toml.write_text(toml.read_text().replace("versions = [1, 2, 3]", "versions = [1, 2, 3, 4]"))
    code, out, _ = run("check", "--schemas-dir", str(tree), "--registry", registry_url,
                       "--subject", f"{namespace}.case.CaseOpened")
    assert code == 1
    assert "payload.region" in out and "(reader-field-missing-default)" in out
    # one finding per problem: the registry's v3 is the file's v3, so the local v3->v4 finding stands alone
    assert out.count("v3->v4 [BACKWARD_TRANSITIVE] payload.region") == 1 and "registry v3" not in out
