"""``casestream schemas check --registry`` against the real Apicurio registry (deploy/infra.sh).

A team's repository (explicit subject files, RecordNameStrategy not required) whose first
version is registered exactly as written: the check compares the files as written with the
registered versions (no envelope of its own around them), says nothing when they match,
reports an incompatible new file once (not once per comparison), and names a registered version
that no file matches.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema
from click.testing import CliRunner

from casestream.cli.schemas import schemas
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.schemacheck.remote import RegistryOptions, open_registry


def _schema(name: str, *extra: dict) -> dict:
    return {"type": "record", "name": name, "namespace": "com.acme.gate",
            "fields": [{"name": "id", "type": "string"}, *extra]}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry_url: str) -> tuple[Path, str]:
    subject = f"gate-{uuid.uuid4().hex[:10]}-value"
    name = f"Thing{uuid.uuid4().hex[:8]}"
    (tmp_path / "avro").mkdir()
    v1 = _schema(name)
    (tmp_path / "avro" / "thing-1.avsc").write_text(json.dumps(v1, indent=2) + "\n")
    (tmp_path / "avro" / "thing-2.avsc").write_text(json.dumps(_schema(
        name, {"name": "note", "type": ["null", "string"], "default": None}), indent=2) + "\n")
    (tmp_path / "casestream-schemas.toml").write_text(
        f'compatibility = "BACKWARD"\n\n[subjects."{subject}"]\nfiles = ["avro/thing-1.avsc", "avro/thing-2.avsc"]\n')
    with ConfluentSchemaRegistry(registry_url, max_retries=0) as reg:
        reg.register(subject, v1)  # the file as written, as a team's serializer registers it
    monkeypatch.chdir(tmp_path)
    return tmp_path, subject


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(schemas, ["check", "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_files_as_written_match_the_registered_versions(repo: tuple[Path, str], registry_url: str) -> None:
    code, doc = run("--registry", registry_url)
    assert code == 0 and doc["findings"] == [], doc


def test_an_incompatible_file_is_one_finding(repo: tuple[Path, str], registry_url: str) -> None:
    root, subject = repo
    v2 = json.loads((root / "avro" / "thing-2.avsc").read_text())
    v2["fields"].append({"name": "channel", "type": "string"})
    (root / "avro" / "thing-2.avsc").write_text(json.dumps(v2, indent=2))
    code, doc = run("--registry", registry_url)
    assert code == 1
    problems = [(f["rule"], f["path"]) for f in doc["findings"]]
    assert problems == [("reader-field-missing-default", "channel")], doc["findings"]


def test_a_registered_version_no_file_matches(repo: tuple[Path, str], registry_url: str) -> None:
    root, subject = repo
    path = root / "avro" / "thing-1.avsc"
    v1 = json.loads(path.read_text())
    v1["doc"] = "edited after it was registered"
    path.write_text(json.dumps(v1))
    code, doc = run("--registry", registry_url)
    assert code == 1
    assert [f["rule"] for f in doc["findings"]] == ["registry-version-unknown"]
    assert doc["findings"][0]["subject"] == subject and doc["findings"][0]["file"] == "avro/thing-2.avsc"


def test_auth_and_tls_options_reach_the_client(registry_url: str) -> None:
    options = RegistryOptions(url=registry_url, basic_auth="team:secret", ca_file="", timeout=3.0)
    assert options.client_config()["basic.auth.user.info"] == "team:secret"
    with open_registry(options) as reg:  # Apicurio here runs without auth: the header is ignored
        assert isinstance(reg.subjects(), list)
    bearer = RegistryOptions(url=registry_url, bearer_token="t0ken").client_config()
    assert bearer["bearer.auth.credentials.source"] == "STATIC_TOKEN" and bearer["bearer.auth.token"] == "t0ken"
    result = CliRunner().invoke(schemas, ["check", "--registry-ca-file", "ca.pem"])
    assert result.exit_code == 2 and "--registry-* options need --registry URL" in result.stderr


@pytest.mark.parametrize("suffix", ["/bogus", "/../.."])
def test_a_url_that_is_not_the_registry_base_is_exit_2(repo: tuple[Path, str], registry_url: str,
                                                        suffix: str) -> None:
    # every subject lookup answers 404 there, which must not read as "nothing registered"
    url = registry_url.rstrip("/") + suffix if suffix == "/bogus" else registry_url.split("/apis/")[0]
    code, doc = run("--registry", url)
    assert code == 2, doc
    assert doc["error"]["target"] == url and "not the base URL of a Confluent-API registry" in doc["error"]["message"]


def test_a_primitive_key_subject_is_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             registry_url: str) -> None:
    topic = f"gate-{uuid.uuid4().hex[:10]}"
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "Key.v1.avsc").write_text('"long"\n')
    (tmp_path / "casestream-schemas.toml").write_text(
        f'[[folders]]\npath = "keys"\nnaming_strategy = "TopicNameStrategy"\ntopic = "{topic}"\nkey = true\n')
    with ConfluentSchemaRegistry(registry_url, max_retries=0) as reg:
        reg._client.register_schema(f"{topic}-key", Schema('"long"', "AVRO"))  # as a key serializer does
    monkeypatch.chdir(tmp_path)
    code, doc = run("--registry", registry_url)
    assert code == 0 and doc["findings"] == [], doc
    (tmp_path / "keys" / "Key.v1.avsc").write_text('"string"\n')
    code, doc = run("--registry", registry_url)
    # registered "long" matches no file; the unregistered "string" cannot read it
    assert code == 1 and {f["rule"] for f in doc["findings"]} == {"registry-version-unknown", "type-mismatch"}, doc
