"""Unit tests of the schema check on whole catalogs: CLI exit codes, formats, history, registry, register."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from casestream.events.catalog import load_catalog
from casestream.cli.schemas import schemas
from casestream.events.registry import InMemoryRegistry, register_catalog
from casestream.schemacheck import RULES, check_catalog, render
from services import schemas_dir

V4_BREAKING = {
    "type": "record", "name": "CaseOpenedPayload", "namespace": "casestream.case",
    "fields": [
        {"name": "title", "type": "string"},
        {"name": "summary", "type": "string", "aliases": ["description"]},
        {"name": "severity", "type": "int"},
        {"name": "evidence_count", "type": "int"},
        {"name": "reporter_email", "type": "string"},
        {"name": "priority", "type": {"type": "enum", "name": "Priority", "symbols": ["LOW", "NORMAL", "HIGH"],
                                      "default": "NORMAL"}, "default": "NORMAL"},
        {"name": "region", "type": "string"},
    ],
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dst = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), dst)
    return dst


def add_version(tree: Path, payload: dict, event_type: str = "CaseOpened", agg: str = "case", n: int = 4) -> Path:
    path = tree / agg / f"{event_type}.v{n}.avsc"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    toml = tree / "catalog.toml"
    old = f"versions = {list(range(1, n))}"
    text = toml.read_text()
    start = text.index(f'[subjects."casestream.{agg}.{event_type}"]')
    at = text.index(old, start)
    toml.write_text(text[:at] + f"versions = {list(range(1, n + 1))}" + text[at + len(old):])
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(schemas, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_own_catalog_is_compatible_and_fast() -> None:
    started = time.perf_counter()
    code, out, _ = run("check", "--schemas-dir", str(schemas_dir()))
    assert time.perf_counter() - started < 2.0
    assert code == 0, out
    catalog = load_catalog(schemas_dir())
    versions = sum(len(s.versions) for s in catalog.subjects.values())
    assert f"{len(catalog.subjects)} subjects, {versions} versions" in out


def test_breaking_version_exits_1_and_names_everything(tree: Path) -> None:
    add_version(tree, V4_BREAKING)
    code, out, _ = run("check", "--schemas-dir", str(tree))
    assert code == 1
    assert "casestream.case.CaseOpened v3->v4 [BACKWARD_TRANSITIVE] payload.region" in out
    assert "(reader-field-missing-default)" in out
    assert "fix: give the field a default" in out
    assert f"at {tree}/case/CaseOpened.v4.avsc:" in out
    # BACKWARD_TRANSITIVE: v4 is also checked against v1 and v2
    assert "v1->v4" in out and "v2->v4" in out


def test_json_and_github_formats(tree: Path) -> None:
    add_version(tree, V4_BREAKING)
    code, out, _ = run("check", "--schemas-dir", str(tree), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["exit_code"] == 1 and not doc["ok"]
    f = doc["findings"][0]
    assert {f["subject"], f["path"], f["rule"], f["mode"]} == {
        "casestream.case.CaseOpened", "payload.region", "reader-field-missing-default", "BACKWARD_TRANSITIVE"}
    assert f["file"].endswith("case/CaseOpened.v4.avsc") and f["line"] > 1 and f["hint"]
    code, out, _ = run("check", "--schemas-dir", str(tree), "--format", "github")
    first = out.splitlines()[0]
    assert code == 1
    assert first.startswith(f"::error file={tree}/case/CaseOpened.v4.avsc,line=")
    assert "title=casestream.case.CaseOpened v1->v4 [BACKWARD_TRANSITIVE] reader-field-missing-default::" in first
    assert "%0Afix: " in first


def test_malformed_avsc_is_one_line_exit_2(tree: Path) -> None:
    (tree / "saga" / "SagaCompleted.v1.avsc").write_text('{"type": "record", "name": ')
    code, out, err = run("check", "--schemas-dir", str(tree))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "saga/SagaCompleted.v1.avsc" in err and "Traceback" not in err
    code, _, err = run("check", "--schemas-dir", str(tree), "--verbose")
    assert code == 2 and "Traceback" in err


def test_invalid_avro_is_exit_2_naming_the_file(tree: Path) -> None:
    path = tree / "saga" / "SagaCompleted.v1.avsc"
    schema = json.loads(path.read_text())
    schema["fields"][0]["type"] = "strnig"
    path.write_text(json.dumps(schema))
    code, _, err = run("check", "--schemas-dir", str(tree))
    assert code == 2 and "saga/SagaCompleted.v1.avsc" in err and "not a valid Avro schema" in err


def test_unknown_subject_and_orphan_file_exit_2(tree: Path) -> None:
    code, _, err = run("check", "--schemas-dir", str(tree), "--subject", "casestream.case.Nope")
    assert code == 2 and "unknown subject" in err and "catalog.toml" in err
    (tree / "case" / "CaseArchived.v1.avsc").write_text("{}")
    code, _, err = run("check", "--schemas-dir", str(tree))
    assert code == 2 and "case/CaseArchived.v1.avsc" in err and "unknown subject" in err


def test_subject_filter(tree: Path) -> None:
    add_version(tree, V4_BREAKING)
    code, out, _ = run("check", "--schemas-dir", str(tree), "--subject", "casestream.saga.SagaCompleted")
    assert code == 0 and "1 subjects" in out


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (lambda s: s["fields"][0].update(type=["null", "string"], default="x"), "union-default-not-first-branch"),
        (lambda s: s["fields"].append({"name": "lvl", "type": {"type": "enum", "name": "Lvl", "symbols": ["A"],
                                                                "default": "B"}}), "enum-default-not-symbol"),
        (lambda s: s["fields"][0].update(default=5), "invalid-default"),
        (lambda s: s.update(name="Completed"), "payload-name"),
        (lambda s: s.pop("namespace"), "name-not-qualified"),
    ],
)
def test_single_schema_rules_exit_1(tree: Path, mutate, rule: str) -> None:  # noqa: ANN001
    path = tree / "saga" / "SagaCompleted.v1.avsc"
    schema = json.loads(path.read_text())
    mutate(schema)
    path.write_text(json.dumps(schema, indent=2))
    code, out, err = run("check", "--schemas-dir", str(tree))
    assert code == 1, (out, err)
    assert f"({rule})" in out and "casestream.saga.SagaCompleted v1" in out


def test_logical_type_change_in_a_new_version(tree: Path) -> None:
    payload = json.loads((tree / "saga" / "SagaCompleted.v1.avsc").read_text())
    payload["fields"].append({"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
                              "default": None})
    add_version(tree, payload, "SagaCompleted", "saga", n=2)
    payload["fields"][-1]["type"][1]["logicalType"] = "timestamp-micros"
    add_version(tree, payload, "SagaCompleted", "saga", n=3)
    report = check_catalog(tree, subjects=["casestream.saga.SagaCompleted"])
    assert {(f.rule, f.versions, f.path) for f in report.errors} == {
        ("logical-type-changed", "v2->v3", "payload.at"),
        ("upcaster-missing", "v1->v2", ""), ("upcaster-missing", "v2->v3", "")}


def test_every_rule_has_a_hint_and_a_source() -> None:
    for rule in RULES.values():
        assert rule.hint and rule.source and rule.title


def test_module_entry_point_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "casestream.schemacheck", "check", "--format", "json"],
                          capture_output=True, text=True, cwd=schemas_dir().parent, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True


# -- --against (git history) -------------------------------------------------------------------

def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(schemas_dir(), root / "schemas")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "published")
    git(root, "tag", "published")
    return root / "schemas"


def test_against_ref_unchanged_and_reformatted_is_ok(repo: Path) -> None:
    path = repo / "case" / "CaseClosed.v1.avsc"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4))
    code, out, _ = run("check", "--schemas-dir", str(repo), "--against", "published")
    assert code == 0, out


def test_against_ref_detects_an_edited_version_with_diff(repo: Path) -> None:
    path = repo / "case" / "CaseOpened.v1.avsc"
    path.write_text(path.read_text().replace('"title", "type": "string"', '"title", "type": "string", "doc": "x"'))
    code, out, _ = run("check", "--schemas-dir", str(repo), "--against", "published")
    assert code == 1
    assert "(published-version-changed)" in out and "casestream.case.CaseOpened v1" in out
    assert "--- published:schemas/case/CaseOpened.v1.avsc" in out and '+    {"name": "title"' in out


def test_against_ref_detects_envelope_change_and_removed_version(repo: Path) -> None:
    env = repo / "envelope.avsc"
    env.write_text(env.read_text().replace('"name": "actor_id", "type": "string"', '"name": "actor", "type": "string"'))
    toml = repo / "catalog.toml"
    text = toml.read_text()
    start = text.index('[subjects."casestream.notice.NoticeFailed"]')
    toml.write_text(text[:start])
    (repo / "notice" / "NoticeFailed.v1.avsc").unlink()
    report = check_catalog(repo, against="published")
    rules = {(f.rule, f.subject) for f in report.errors}
    assert ("published-version-changed", "") in rules
    assert ("published-version-removed", "casestream.notice.NoticeFailed") in rules


def test_against_unknown_ref_is_exit_2(repo: Path) -> None:
    code, _, err = run("check", "--schemas-dir", str(repo), "--against", "no-such-ref")
    assert code == 2 and "unknown git ref 'no-such-ref'" in err


def test_against_outside_a_repository_is_exit_2(tree: Path) -> None:
    code, _, err = run("check", "--schemas-dir", str(tree), "--against", "HEAD")
    assert code == 2 and err.startswith("error:")


# -- --registry and register ---------------------------------------------------------------------

def test_register_catalog_is_idempotent_and_sets_levels() -> None:
    catalog = load_catalog(schemas_dir())
    registry = InMemoryRegistry()
    steps = register_catalog(catalog, registry)
    assert sum(s.action == "registered" for s in steps) == sum(
        len(s.versions) for s in catalog.subjects.values())
    assert sum(s.action == "compatibility-set" for s in steps) == len(catalog.subjects)
    assert registry.get_compatibility("casestream.case.CaseOpened") == "BACKWARD_TRANSITIVE"
    again = register_catalog(catalog, registry)
    assert {s.action for s in again} == {"unchanged", "compatibility-ok"}
    assert [v.version for v in registry.versions("casestream.case.CaseOpened")] == [1, 2, 3]


def test_register_dry_run_registers_nothing() -> None:
    registry = InMemoryRegistry()
    steps = register_catalog(load_catalog(schemas_dir()), registry, dry_run=True)
    assert {s.action for s in steps} == {"would-register", "compatibility-would-set"}
    assert registry.subjects() == []


def test_registry_check_clean_then_drift(tree: Path) -> None:
    registry = InMemoryRegistry()
    register_catalog(load_catalog(tree), registry)
    report = check_catalog(tree, registry=registry)
    assert report.findings == []
    # someone registered a v4 by hand that no file matches, and the level was changed
    hand = load_catalog(tree).schema("CaseOpened")
    hand["doc"] = "hand-made"
    registry.register("casestream.case.CaseOpened", hand)
    registry.set_compatibility("casestream.case.CaseOpened", "NONE")
    report = check_catalog(tree, registry=registry)
    assert {(f.rule, f.severity) for f in report.findings} == {
        ("registry-version-unknown", "error"), ("compatibility-level-mismatch", "warning")}


def test_registry_check_of_an_unregistered_version(tree: Path) -> None:
    registry = InMemoryRegistry()
    register_catalog(load_catalog(tree), registry)
    add_version(tree, V4_BREAKING)
    report = check_catalog(tree, registry=registry, subjects=["casestream.case.CaseOpened"])
    found = [(f.rule, f.versions) for f in report.errors if f.path == "payload.region"]
    # one finding per problem: the registry's v3 is the file's v3, so the local v3->v4 finding stands alone
    assert found.count(("reader-field-missing-default", "v3->v4")) == 1
    assert not [v for r, v in found if v.startswith("registry v3")]
    registry.register("casestream.case.CaseOpened", {**load_catalog(tree).schema("CaseOpened", 3), "doc": "hand"})
    report = check_catalog(tree, registry=registry, subjects=["casestream.case.CaseOpened"])
    found = {(f.rule, f.versions) for f in report.errors}
    assert any(r == "registry-version-unknown" and v.startswith("registry v4 ") for r, v in found)


def test_registry_down_is_exit_2_one_line(tree: Path) -> None:
    code, _, err = run("check", "--schemas-dir", str(tree), "--registry", "http://127.0.0.1:9/apis/ccompat/v7")
    assert code == 2 and err.count("\n") == 1 and "http://127.0.0.1:9/apis/ccompat/v7" in err
    code, _, err = run("register", "--schemas-dir", str(tree), "--registry", "http://127.0.0.1:9/apis/ccompat/v7")
    assert code == 2 and err.count("\n") == 1 and "127.0.0.1:9" in err and "Traceback" not in err


def test_register_refuses_an_incompatible_catalog(tree: Path) -> None:
    add_version(tree, V4_BREAKING)
    code, out, err = run("register", "--schemas-dir", str(tree), "--registry", "http://127.0.0.1:9")
    assert code == 1 and "not registering" in err


def test_render_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        render(check_catalog(schemas_dir()), "xml")


# -- a registry that answers garbage -------------------------------------------------------------

@pytest.fixture
def garbage_registry() -> Iterator[str]:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Garbage(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = b"<html>not a registry</html>" if "subjects" in self.path else b'{"unexpected": 1}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"
    server.shutdown()
    server.server_close()
    thread.join()


def test_registry_answering_garbage_is_exit_2_one_line(tree: Path, garbage_registry: str) -> None:
    from casestream.errors import RegistryUnavailable
    from casestream.events.registry import ConfluentSchemaRegistry

    code, out, err = run("check", "--schemas-dir", str(tree), "--registry", garbage_registry)
    assert code == 2 and out == "" and err.count("\n") == 1 and garbage_registry in err
    with ConfluentSchemaRegistry(garbage_registry, max_retries=0) as reg:
        with pytest.raises(RegistryUnavailable, match="unparseable"):
            reg.subjects()
        with pytest.raises(RegistryUnavailable):
            reg.get_compatibility("x")
        with pytest.raises(RegistryUnavailable):
            reg.get_schema(1)


def test_compatible_new_version_without_an_upcaster_fails(tree: Path) -> None:
    v4 = json.loads((tree / "case" / "CaseOpened.v3.avsc").read_text())
    v4["fields"].append({"name": "region", "type": "string", "default": "unknown"})  # compatible
    add_version(tree, v4)
    code, out, _ = run("check", "--schemas-dir", str(tree))
    assert code == 1, out
    assert "casestream.case.CaseOpened v3->v4" in out and "(upcaster-missing)" in out
    assert "no upcaster CaseOpened v3->v4" in out
    assert f"{tree}/case/CaseOpened.v4.avsc" in out
    assert "reader-field-missing-default" not in out  # the pair itself is compatible
    assert "upcaster-missing" in RULES


# -- registry authentication reaches the server -------------------------------------------------

def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, PEM files in ``folder``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "registry.pem", folder / "registry.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture(params=["http", "https"])
def recording_registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[dict], list[str]]]:
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict] = []

    class Recording(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(dict(self.headers))
            listing = self.path.split("?")[0].rstrip("/") == "/subjects"  # a registry's base URL answers it
            body = b"[]" if listing else b'{"error_code": 40401, "message": "Subject not found"}'
            self.send_response(200 if listing else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    tls: list[str] = []
    if request.param == "https":
        cert_file, key_file = _self_signed(tmp_path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        tls = ["--registry-ca-file", str(cert_file)]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{request.param}://127.0.0.1:{server.server_address[1]}", seen, tls
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(("option", "value", "header"), [
    ("--registry-basic-auth", "team:s3cret", "Basic dGVhbTpzM2NyZXQ="),
    ("--registry-bearer-token", "t0ken", "Bearer t0ken"),
])
def test_registry_credentials_reach_the_registry(tree: Path, recording_registry, option: str, value: str,
                                                 header: str) -> None:  # noqa: ANN001
    url, seen, tls = recording_registry
    args = ["check", "--schemas-dir", str(tree), "--registry", url, option, value,
            "--subject", "casestream.saga.SagaCompleted"]
    code, out, err = run(*args, *tls)
    assert code == 0, out + err
    assert seen and all(h.get("Authorization") == header for h in seen)
    if tls:  # without the registry's CA the TLS handshake fails: exit 2 naming the URL
        count = len(seen)
        code, out, err = run(*args)
        assert code == 2 and url in err and "Traceback" not in err and len(seen) == count


def test_line_of_a_nested_field_is_its_own_declaration() -> None:
    from casestream.schemacheck.model import line_of

    text = ('{"type": "record", "name": "Order", "fields": [\n'
            '  {"name": "id", "type": "string"},\n'
            '  {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [\n'
            '    {"name": "id", "type": "long"}]}}]}\n')
    assert line_of(text, "id") == 2
    assert line_of(text, "customer.id") == 4
    assert line_of(text, "payload.customer") == 3  # a prefix the file does not declare is skipped
    assert line_of(text, "missing") == 1
