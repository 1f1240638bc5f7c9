"""Catalogs from several schema folders (``load_catalog(*folders)``, ``Catalog.merge``) and
the upcaster chain a catalog names (``[catalog] upcasters``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from casestream.errors import ConfigError
from casestream.events import CatalogError, InMemoryRegistry, load_catalog, open_codec
from services import schemas_dir
from casestream_suite_schemas.upcasters import default_upcasters

ENVELOPE = '{"type": "record", "name": "Envelope", "fields": [{"name": "event_id", "type": "string"}]}'


def _team(root: Path, namespace: str, event_type: str, *, upcasters: str | None = None,
          versions: int = 1) -> Path:
    (root / "thing").mkdir(parents=True)
    (root / "envelope.avsc").write_text(ENVELOPE)
    for v in range(1, versions + 1):
        (root / "thing" / f"{event_type}.v{v}.avsc").write_text(
            '{"type": "record", "name": "%sPayload", "fields": [{"name": "a", "type": "string"}]}' % event_type)
    key = f'upcasters = "{upcasters}"\n' if upcasters else ""
    (root / "catalog.toml").write_text(
        f'[catalog]\nnamespace = "{namespace}"\n{key}\n'
        f'[subjects."{namespace}.thing.{event_type}"]\nevent_type = "{event_type}"\n'
        f'aggregate_type = "thing"\ntopic = "outbox.event.thing"\nowner = "t"\nsource = "t"\n'
        f'compatibility = "BACKWARD"\nversions = {list(range(1, versions + 1))}\n')
    return root


def test_the_suite_catalog_names_its_upcaster_chain() -> None:
    catalog = load_catalog(schemas_dir())
    assert catalog.upcasters == ("casestream_suite_schemas.upcasters:default_upcasters",)
    assert catalog.upcaster_chain().steps() == default_upcasters().steps()


def test_a_catalog_without_upcasters_has_an_empty_chain(tmp_path: Path) -> None:
    catalog = load_catalog(_team(tmp_path / "t", "team", "Thing"))
    assert catalog.upcasters == () and catalog.upcaster_chain().steps() == []


def test_an_unresolvable_upcasters_reference_fails_naming_it(tmp_path: Path) -> None:
    catalog = load_catalog(_team(tmp_path / "t", "team", "Thing", upcasters="nowhere.at_all:chain"))
    with pytest.raises(ConfigError, match="nowhere.at_all:chain"):
        catalog.upcaster_chain()


def test_a_malformed_upcasters_reference_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="upcasters"):
        load_catalog(_team(tmp_path / "t", "team", "Thing", upcasters="no-colon"))


def test_several_folders_merge_subjects_and_upcasters(tmp_path: Path) -> None:
    theirs = _team(tmp_path / "theirs", "other", "Gadget")
    merged = load_catalog(schemas_dir(), theirs)
    assert "Gadget" in merged.event_types and "CaseOpened" in merged.event_types
    assert merged.subject_for("Gadget").subject == "other.thing.Gadget"
    assert merged.roots == (schemas_dir(), theirs)
    assert merged.upcaster_chain().steps() == default_upcasters().steps()
    codec = open_codec(merged, InMemoryRegistry(), auto_register=True)  # the chain verifies
    assert ("Gadget", 1) in codec.schema_ids


def test_the_same_event_type_in_two_folders_names_both(tmp_path: Path) -> None:
    a = _team(tmp_path / "a", "one", "Thing")
    b = _team(tmp_path / "b", "two", "Thing")
    with pytest.raises(CatalogError, match=rf"event type Thing is declared in {a} and in {b}"):
        load_catalog(a, b)


def test_the_same_subject_in_two_folders_names_both(tmp_path: Path) -> None:
    a = _team(tmp_path / "a", "one", "Thing")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    with pytest.raises(CatalogError, match=rf"subject one.thing.Thing is declared in {a} and in {b}"):
        load_catalog(a, b)


def test_no_folder_is_an_error() -> None:
    with pytest.raises(CatalogError, match="no schemas folder"):
        load_catalog()


def test_schemas_check_reads_the_chain_from_the_catalog(tmp_path: Path) -> None:
    from casestream.schemacheck.runner import check_catalog

    # no chain declared: the upcaster rule does not apply
    team = _team(tmp_path / "t", "team", "Thing", versions=2)
    assert [f.rule for f in check_catalog(team).findings if f.rule == "upcaster-missing"] == []
    # a declared chain without the 1 -> 2 step
    team = _team(tmp_path / "u", "team", "Thing", versions=2, upcasters="casestream.events.upcasting:UpcasterChain")
    report = check_catalog(team)
    assert [f.rule for f in report.findings if f.rule == "upcaster-missing"] == ["upcaster-missing"]
