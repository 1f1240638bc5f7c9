"""Unit tests of casestream.events.catalog: loading, composition, lookups, and errors naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastavro import parse_schema

from casestream.events.catalog import (
    COMPATIBILITY_LEVELS,
    CatalogError,
    compose,
    load_catalog,
    schema_text,
)
from casestream.errors import UnknownSchemaError
from services import schemas_dir

CONTRACT_EVENTS = {
    "case": ["CaseOpened", "CaseSubmitted", "CaseClosed", "CaseReturned"],
    "saga": ["DecisionRequested", "NoticeRequested", "CaseCloseRequested", "CaseReturnRequested",
             "SagaCompleted", "SagaCompensated"],
    "decision": ["ViolationDetermined", "NoViolationFound", "DecisionFailed"],
    "notice": ["NoticeIssued", "NoticeFailed"],
}


@pytest.fixture
def tmp_schemas(tmp_path: Path) -> Path:
    dst = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), dst)
    return dst


def test_catalog_names_every_event_of_the_brief() -> None:
    cat = load_catalog(schemas_dir())
    expected = {f"casestream.{agg}.{et}" for agg, ets in CONTRACT_EVENTS.items() for et in ets}
    assert expected <= set(cat.subjects), expected - set(cat.subjects)  # the catalog may hold more
    for spec in cat.subjects.values():
        assert spec.topic == f"outbox.event.{spec.aggregate_type}"
        assert spec.compatibility in COMPATIBILITY_LEVELS
    assert cat.newest_version("CaseOpened") == 3
    assert cat.subject_for("CaseOpened").compatibility == "BACKWARD_TRANSITIVE"
    assert cat.topics == ("outbox.event.case", "outbox.event.decision", "outbox.event.notice", "outbox.event.saga")
    assert cat.topic_for("notice") == "outbox.event.notice"
    assert {s.owner for s in cat.subjects.values()} <= {"case", "saga", "decision", "notification"}


def test_composed_schema_is_self_contained_and_named_after_the_subject() -> None:
    cat = load_catalog(schemas_dir())
    for sv in cat.iter_versions():
        schema = cat.schema(sv.event_type, sv.version)
        assert f"{schema['namespace']}.{schema['name']}" == sv.subject
        names = [f["name"] for f in schema["fields"]]
        assert names[-1] == "payload"
        assert names[:-1] == [f["name"] for f in cat.envelope["fields"]]
        parse_schema(json.loads(schema_text(schema)))  # no named_schemas needed: self-contained


def test_schema_returns_a_copy() -> None:
    cat = load_catalog(schemas_dir())
    s = cat.schema("CaseOpened")
    s["fields"].clear()
    assert cat.schema("CaseOpened")["fields"]


def test_v3_renames_description_with_alias_and_adds_priority_default() -> None:
    cat = load_catalog(schemas_dir())
    p3 = {f["name"]: f for f in cat.version("CaseOpened", 3).payload["fields"]}
    assert p3["summary"]["aliases"] == ["description"]
    assert "description" not in p3
    p2 = {f["name"]: f for f in cat.version("CaseOpened", 2).payload["fields"]}
    assert p2["priority"]["default"] == "NORMAL"
    assert p2["priority"]["type"]["symbols"] == ["LOW", "NORMAL", "HIGH"]


def test_unknown_event_type_and_version() -> None:
    cat = load_catalog(schemas_dir())
    with pytest.raises(UnknownSchemaError, match="Nope"):
        cat.subject_for("Nope")
    with pytest.raises(UnknownSchemaError, match="version 9"):
        cat.version("CaseOpened", 9)
    with pytest.raises(UnknownSchemaError):
        cat.topic_for("nope")


def test_compose_does_not_alias_its_inputs() -> None:
    env = {"type": "record", "name": "E", "namespace": "x", "fields": [{"name": "a", "type": "string"}]}
    payload = {"type": "record", "name": "P", "namespace": "x", "fields": []}
    out = compose(env, "x.y.Thing", payload)
    out["fields"][0]["name"] = "changed"
    assert env["fields"][0]["name"] == "a"
    assert (out["namespace"], out["name"]) == ("x.y", "Thing")


def test_malformed_json_names_the_file_and_line(tmp_schemas: Path) -> None:
    (tmp_schemas / "case" / "CaseClosed.v1.avsc").write_text('{"type": "record",\n "name": ')
    with pytest.raises(CatalogError) as e:
        load_catalog(tmp_schemas)
    assert e.value.path == "case/CaseClosed.v1.avsc"
    assert "line 2" in str(e.value)


def test_missing_version_file(tmp_schemas: Path) -> None:
    (tmp_schemas / "case" / "CaseOpened.v2.avsc").unlink()
    with pytest.raises(CatalogError, match="CaseOpened.v2.avsc"):
        load_catalog(tmp_schemas)


def test_orphan_version_file_is_an_unknown_subject(tmp_schemas: Path) -> None:
    (tmp_schemas / "case" / "CaseArchived.v1.avsc").write_text("{}")
    with pytest.raises(CatalogError, match="unknown subject or version: CaseArchived v1"):
        load_catalog(tmp_schemas)


def test_gap_in_versions_and_bad_level(tmp_schemas: Path) -> None:
    toml = tmp_schemas / "catalog.toml"
    text = toml.read_text()
    toml.write_text(text.replace("versions = [1, 2, 3]", "versions = [1, 3]"))
    with pytest.raises(CatalogError, match="no gap"):
        load_catalog(tmp_schemas)
    toml.write_text(text.replace('compatibility = "BACKWARD_TRANSITIVE"', 'compatibility = "SIDEWAYS"'))
    with pytest.raises(CatalogError, match="SIDEWAYS"):
        load_catalog(tmp_schemas)


def test_subject_must_follow_the_naming_rule(tmp_schemas: Path) -> None:
    toml = tmp_schemas / "catalog.toml"
    toml.write_text(toml.read_text().replace('[subjects."casestream.case.CaseClosed"]', '[subjects."cs.CaseClosed"]'))
    with pytest.raises(CatalogError, match="casestream.case.CaseClosed"):
        load_catalog(tmp_schemas)


def test_missing_schemas_folder(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="schemas folder not found"):
        load_catalog(tmp_path / "nowhere")
