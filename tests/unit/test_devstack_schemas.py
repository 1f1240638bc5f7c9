"""The dev stack registers every installed schemas folder, and a team finds another team's folder
by name: ``casestream.service.schema_folder`` (a missing one names the installed folders),
``devstack.installed_schema_folders`` (a subject two folders define differently is one line
naming it and both folders; an identical one is fine) and ``ServiceStack.register_schemas``
(``schemas register --schemas-dir`` for each folder, never ``./schemas`` of the working
directory). The folders here are written to a temporary directory and registered through a
patched entry point lookup."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from casestream.errors import ConfigError
from casestream.service import ServiceStack, StackError, discovery, schema_folder
from casestream.service.devstack import installed_schema_folders

ENVELOPE = {"type": "record", "name": "Envelope", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "event_type", "type": "string"},
    {"name": "event_version", "type": "int"}]}


def _folder(root: Path, namespace: str, *, field_type: str = "string") -> Path:
    """A schemas folder with one subject ``<namespace>.item.ItemAdded`` (v1, payload ``name``)."""
    root.mkdir(parents=True)
    (root / "envelope.avsc").write_text(json.dumps({**ENVELOPE, "namespace": namespace}))
    (root / "item").mkdir()
    (root / "item" / "ItemAdded.v1.avsc").write_text(json.dumps(
        {"type": "record", "name": "ItemAddedV1", "fields": [{"name": "name", "type": field_type}]}))
    (root / "catalog.toml").write_text(f'''[catalog]
envelope = "envelope.avsc"
namespace = "{namespace}"

[subjects."{namespace}.item.ItemAdded"]
event_type = "ItemAdded"
aggregate_type = "item"
topic = "outbox.event.item"
owner = "items"
source = "items"
compatibility = "BACKWARD"
versions = [1]
''')
    return root


@pytest.fixture()
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Register ``name -> folder`` entries (filled in by the test) as the only installed ones."""
    registered: dict[str, Path] = {}
    module = tmp_path / "fakeschemafolders.py"
    module.write_text("from pathlib import Path\nFOLDERS = {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fakeschemafolders  # type: ignore[import-not-found]

    monkeypatch.setattr(fakeschemafolders, "FOLDERS", registered)
    for name in ("teama", "teamb", "teamc"):
        monkeypatch.setattr(fakeschemafolders, name, lambda n=name: registered[n], raising=False)

    def entry_points(*, group: str) -> list[EntryPoint]:
        if group != discovery.SCHEMAS_GROUP:
            return []
        return [EntryPoint(name, f"fakeschemafolders:{name}", group) for name in registered]

    monkeypatch.setattr(discovery, "entry_points", entry_points)
    return registered


def test_schema_folder_finds_an_installed_folder_by_name(folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    assert schema_folder("teama") == tmp_path / "a"
    assert discovery.schema_folders() == [tmp_path / "a"]


def test_a_missing_schema_folder_names_the_installed_ones(folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    folders["teamb"] = _folder(tmp_path / "b", "globex")
    with pytest.raises(ConfigError) as e:
        schema_folder("suite")
    message = str(e.value)
    assert "'suite'" in message and "installed: teama, teamb" in message and "\n" not in message


def test_no_folder_installed_says_none(folders: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="installed: none"):
        schema_folder("suite")


def test_every_installed_folder_is_found(folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teamb"] = _folder(tmp_path / "b", "globex")
    folders["teama"] = _folder(tmp_path / "a", "acme")
    assert installed_schema_folders() == {"teama": tmp_path / "a", "teamb": tmp_path / "b"}


def test_one_subject_defined_differently_in_two_folders_is_one_line_naming_both(
        folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    folders["teamb"] = _folder(tmp_path / "b", "acme", field_type="long")
    with pytest.raises(StackError) as e:
        installed_schema_folders()
    message = str(e.value)
    assert "\n" not in message
    assert "acme.item.ItemAdded" in message
    assert str(tmp_path / "a") in message and str(tmp_path / "b") in message


def test_one_subject_defined_alike_in_two_folders_is_accepted(folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    folders["teamb"] = _folder(tmp_path / "b", "acme")
    assert list(installed_schema_folders()) == ["teama", "teamb"]


def test_a_folder_that_does_not_load_is_a_stack_error_naming_it(folders: dict[str, Path], tmp_path: Path) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    (tmp_path / "a" / "catalog.toml").write_text("[catalog\n")
    with pytest.raises(StackError, match="catalog.toml"):
        installed_schema_folders()


def test_the_stack_registers_every_folder_and_not_the_working_directory(
        folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    folders["teamb"] = _folder(tmp_path / "b", "globex")
    here = tmp_path / "cwd"
    _folder(here / "schemas", "initech")  # a team's repository: ignored
    monkeypatch.chdir(here)
    calls: list[list[str]] = []

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    stack = ServiceStack(env={"CASESTREAM_REGISTRY_URL": "http://127.0.0.1:9/apis/ccompat/v7"}, specs={})
    stack.register_schemas()
    assert [c[c.index("--schemas-dir") + 1] for c in calls] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert all(c[c.index("--registry") + 1] == "http://127.0.0.1:9/apis/ccompat/v7" for c in calls)
    assert all(c[c.index("schemas"):c.index("schemas") + 2] == ["schemas", "register"] for c in calls)


def test_a_conflict_registers_nothing(folders: dict[str, Path], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    folders["teamb"] = _folder(tmp_path / "b", "acme", field_type="long")
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    with pytest.raises(StackError, match="defined differently"):
        ServiceStack(env={}, specs={}).register_schemas()
    assert calls == []


def test_a_failed_registration_names_the_folder(folders: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    folders["teama"] = _folder(tmp_path / "a", "acme")
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 2, "", "error: registry down"))
    with pytest.raises(StackError) as e:
        ServiceStack(env={}, specs={}).register_schemas()
    assert "teama" in str(e.value) and str(tmp_path / "a") in str(e.value) and "registry down" in str(e.value)
