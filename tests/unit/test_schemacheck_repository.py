"""The schema gate on a team's repository that is not laid out like casestream's
(tests/fixtures/acme-schemas: casestream-schemas.toml, folders with two naming conventions,
explicit files, a named type referenced across files), run through the CLI as CI runs it:
every output format with every exit code, waivers, the git-ref comparison (also from a
shallow clone), the pre-commit hook, the upcaster rule only where a chain is declared."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from casestream.cli.schemas import schemas

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "acme-schemas"
REPO = Path(__file__).resolve().parents[2]
SUBJECTS = {"com.acme.orders.OrderPlaced", "com.acme.orders.OrderCancelled", "payments-value",
            "shipping-com.acme.shipping.Shipped"}
BREAKING_V3 = {
    "type": "record", "name": "OrderPlaced", "namespace": "com.acme.orders",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "total", "type": "com.acme.common.Money"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "channel", "type": "string"},
    ],
}


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "acme"
    shutil.copytree(FIXTURE, root)
    monkeypatch.chdir(root)
    return root


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(schemas, ["check", *args])
    return result.exit_code, result.stdout, result.stderr


def break_orders(root: Path) -> Path:
    path = root / "avro" / "orders" / "OrderPlaced.v3.avsc"
    path.write_text(json.dumps(BREAKING_V3, indent=2) + "\n")
    return path


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def test_the_repository_configuration_names_every_subject(acme: Path) -> None:
    code, out, err = run("--format", "json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert set(doc["subject_names"]) == SUBJECTS  # RecordName, TopicRecordName and explicit subjects
    assert doc["versions"] == 6 and doc["findings"] == []


def test_pyproject_table_is_the_same_configuration(acme: Path) -> None:
    text = (acme / "casestream-schemas.toml").read_text()
    (acme / "casestream-schemas.toml").unlink()
    body = text.replace('[[folders]]', '[[tool.casestream.schemas.folders]]').replace(
        '[subjects.', '[tool.casestream.schemas.subjects.')
    head, _, rest = body.partition("[[tool")
    (acme / "pyproject.toml").write_text("[tool.casestream.schemas]\n" + head + "[[tool" + rest)
    code, out, _ = run("--format", "json")
    assert code == 0 and set(json.loads(out)["subject_names"]) == SUBJECTS


@pytest.mark.parametrize("fmt", ["text", "json", "github", "junit", "sarif"])
def test_each_format_exit_0_1_2(acme: Path, fmt: str) -> None:
    code, out, _ = run("--format", fmt)
    assert code == 0, out
    path = break_orders(acme)
    code, out, _ = run("--format", fmt)
    assert code == 1, out
    rel = "avro/orders/OrderPlaced.v3.avsc"
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"channel"' in t)
    if fmt == "text":
        assert f"at {rel}:{line}" in out and "(reader-field-missing-default)" in out
    elif fmt == "json":
        f = json.loads(out)["findings"][0]
        assert (f["file"], f["line"], f["rule"]) == (rel, line, "reader-field-missing-default")
    elif fmt == "github":
        assert out.startswith(f"::error file={rel},line={line},title=com.acme.orders.OrderPlaced v")
    elif fmt == "junit":
        suite = ET.fromstring(out).find("testsuite")
        failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
        assert failed == ["com.acme.orders.OrderPlaced"] and suite.get("tests") == "4"
    else:
        result = json.loads(out)["runs"][0]["results"][0]
        loc = result["locations"][0]["physicalLocation"]
        assert (result["ruleId"], loc["artifactLocation"]["uri"], loc["region"]["startLine"]) == (
            "reader-field-missing-default", rel, line)
    path.write_text('{"type": "record", "name": ')
    code, out, err = run("--format", fmt)
    assert code == 2, out + err
    assert "Traceback" not in out + err and rel in err and len(err.strip().splitlines()) == 1
    if fmt == "json":
        assert json.loads(out)["exit_code"] == 2 and rel in json.loads(out)["error"]["target"]
    elif fmt == "github":
        assert out.startswith(f"::error file={rel},line=1,title=schemas check input error::")
    elif fmt == "junit":
        assert ET.fromstring(out).find("testsuite/testcase/error") is not None
    elif fmt == "sarif":
        assert json.loads(out)["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_ignore_a_rule_for_one_subject_or_everywhere(acme: Path) -> None:
    break_orders(acme)
    assert run("--ignore", "reader-field-missing-default:payments-value")[0] == 1
    assert run("--ignore", "reader-field-missing-default:com.acme.orders.OrderPlaced")[0] == 0
    assert run("--ignore", "reader-field-missing-default")[0] == 0
    code, _, err = run("--ignore", "no-such-rule")
    assert code == 2 and "unknown rule 'no-such-rule'" in err
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text().replace('[subjects."com.acme.orders.OrderCancelled"]',
                                           '[subjects."com.acme.orders.OrderPlaced"]\n'
                                           'ignore = ["reader-field-missing-default"]\n\n'
                                           '[subjects."com.acme.orders.OrderCancelled"]'))
    assert run()[0] == 0


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('naming_strategy = "RecordNameStrategy"', 'naming_strategy = "SubjectStrategy"'),
     "naming_strategy 'SubjectStrategy' is not one of"),
    (lambda t: t.replace('topic = "shipping"\n', ''), "TopicRecordNameStrategy needs a topic"),
    (lambda t: t.replace('compatibility = "FORWARD"', 'compatibility = "SIDEWAYS"'), "compatibility 'SIDEWAYS'"),
    (lambda t: t + '\ncolour = "blue"\n', "unknown key(s) colour"),
    (lambda t: t.replace('"avro/common/Money.avsc"', '"avro/common/Nope.avsc"'), "avro/common/Nope.avsc"),
    (lambda t: t.replace('references = ["avro/common/Money.avsc"]\n', ''),
     "com.acme.common.Money) (a named type declared in another file: list that file in references = [...])"),
])
def test_configuration_errors_are_exit_2_naming_the_file(acme: Path, edit, message: str) -> None:  # noqa: ANN001
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(edit(cfg.read_text()))
    code, out, err = run("--format", "github")
    assert code == 2 and message in err and "Traceback" not in err, err
    assert out.startswith("::error ")


def test_no_configuration_here_is_exit_2_not_the_installed_catalog(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # a team's CI in the wrong folder (or with a misnamed configuration) must not pass by checking
    # the catalog an installed package ships (casestream's own, in every install)
    (tmp_path / "avro").mkdir()
    (tmp_path / "avro" / "OrderPlaced.avsc").write_text((FIXTURE / "avro/orders/OrderPlaced.v1.avsc").read_text())
    (tmp_path / "casestream-schema.toml").write_text('[[folders]]\npath = "avro"\n')  # misnamed
    monkeypatch.chdir(tmp_path)
    code, out, err = run("--format", "json")
    assert code == 2, out + err
    message = json.loads(out)["error"]["message"]
    assert "no casestream-schemas.toml" in message and "--schemas-dir" in message and str(tmp_path) in message


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('[subjects."com.acme.orders.OrderCancelled"]', '[subjects."com.acme.orders.OrderCanceled"]'),
     '[subjects."com.acme.orders.OrderCanceled"] names no subject'),
    (lambda t: 'ignore = ["logical-type-changed:com.acme.order.OrderPlaced"]\n' + t,
     "'logical-type-changed:com.acme.order.OrderPlaced' names no subject"),
])
def test_a_misspelt_subject_in_the_configuration_is_exit_2(acme: Path, edit, message: str) -> None:  # noqa: ANN001
    # else its level or waiver would silently not apply
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(edit(cfg.read_text()))
    code, out, err = run("--format", "json")
    assert code == 2, out + err
    error = json.loads(out)["error"]
    assert message in error["message"] and error["target"] == "casestream-schemas.toml"
    assert "com.acme.orders.OrderCancelled" in error["message"]  # the known subjects are listed
    shutil.copy(FIXTURE / "casestream-schemas.toml", cfg)
    code, _, err = run("--ignore", "logical-type-changed:nope")
    assert code == 2 and "--ignore logical-type-changed:nope: no such subject" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--config", "avro"], "avro: is a folder, not a casestream-schemas.toml"),
    (["--schemas-dir", "casestream-schemas.toml"], "casestream-schemas.toml: is a file, not a folder"),
])
def test_a_path_of_the_wrong_kind_is_an_input_error_in_the_chosen_format(acme: Path, args: list[str],
                                                                        message: str) -> None:
    code, out, err = run(*args, "--format", "json")
    assert code == 2 and message in json.loads(out)["error"]["message"], out + err


def test_schemas_dir_of_a_plain_folder_does_not_double_the_path(acme: Path) -> None:
    flat = acme / "flat"
    flat.mkdir()
    v1 = json.loads((acme / "avro" / "orders" / "OrderCancelled.v1.avsc").read_text())
    (flat / "OrderCancelled.v1.avsc").write_text(json.dumps(v1))
    v1["fields"].append({"name": "by", "type": "string"})
    (flat / "OrderCancelled.v2.avsc").write_text(json.dumps(v1))
    code, out, _ = run("--schemas-dir", "flat", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["findings"][0]["file"] == "flat/OrderCancelled.v2.avsc", out
    assert doc["subject_names"] == ["com.acme.orders.OrderCancelled"]


def test_upcaster_rule_only_where_the_repository_declares_its_chain(acme: Path) -> None:
    assert "upcaster-missing" not in run()[1]
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text('upcasters = "casestream.events.upcasting:UpcasterChain"\n' + cfg.read_text())
    code, out, _ = run()
    assert code == 1 and "(upcaster-missing)" in out and "com.acme.orders.OrderPlaced v1->v2" in out
    assert "shared/casestream" not in out and "casestream.<" not in out
    assert run("--ignore", "upcaster-missing")[0] == 0
    cfg.write_text(cfg.read_text().replace("casestream.events.upcasting:UpcasterChain", "acme_missing.mod:chain"))
    code, _, err = run()
    assert code == 2 and "acme_missing" in err and "Traceback" not in err


def test_against_a_git_ref(acme: Path) -> None:
    git(acme, "init", "-q")
    git(acme, "add", ".")
    git(acme, "commit", "-q", "-m", "published")
    path = acme / "payments" / "payment-first.avsc"
    doc = json.loads(path.read_text())
    doc = {k: doc[k] for k in reversed(list(doc))}  # attribute order, whitespace, {"type": "string"}
    doc["fields"][0]["type"] = {"type": "string"}
    path.write_text(json.dumps(doc, indent=8))
    assert run("--against", "HEAD")[0] == 0
    path.write_text(path.read_text().replace('"payment_id"', '"payment_ref"'))
    assert "payment_ref" in path.read_text()
    code, out, _ = run("--against", "HEAD")
    assert code == 1 and "(published-version-changed)" in out and "payments-value v1" in out
    assert "--- HEAD:payments/payment-first.avsc" in out
    code, _, err = run("--against", "no-such-ref")
    assert code == 2 and "unknown git ref 'no-such-ref'" in err


def test_against_a_git_ref_after_moving_a_folder(acme: Path) -> None:
    git(acme, "init", "-q")
    git(acme, "add", ".")
    git(acme, "commit", "-q", "-m", "published")
    (acme / "avro" / "orders").rename(acme / "avro" / "order-events")
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text().replace('path = "avro/orders"', 'path = "avro/order-events"'))
    code, out, _ = run("--against", "HEAD")
    assert code == 0, out  # the configuration at HEAD finds the old paths; the schemas are the same
    path = acme / "avro" / "order-events" / "OrderPlaced.v1.avsc"
    path.write_text(path.read_text().replace('"order_id"', '"order_ref"'))
    code, out, _ = run("--against", "HEAD", "--format", "json")
    changed = [f for f in json.loads(out)["findings"] if f["rule"] == "published-version-changed"]
    assert code == 1 and [(f["subject"], f["versions"], f["file"]) for f in changed] == [
        ("com.acme.orders.OrderPlaced", "v1", "avro/order-events/OrderPlaced.v1.avsc")]


def test_against_a_git_ref_a_changed_referenced_type_is_a_changed_published_version(acme: Path) -> None:
    git(acme, "init", "-q")
    git(acme, "add", ".")
    git(acme, "commit", "-q", "-m", "published")
    money = acme / "avro" / "common" / "Money.avsc"
    doc = json.loads(money.read_text())
    money.write_text(json.dumps(doc, indent=7))  # layout only
    assert run("--against", "HEAD")[0] == 0
    doc["fields"][0]["type"] = "int" if doc["fields"][0]["type"] != "int" else "long"
    money.write_text(json.dumps(doc))
    code, out, _ = run("--against", "HEAD", "--format", "json")
    changed = [f for f in json.loads(out)["findings"] if f["rule"] == "published-version-changed"]
    assert code == 1 and [f["file"] for f in changed] == ["avro/common/Money.avsc"], out
    assert "every published version that uses it" in changed[0]["message"]


def test_against_a_git_ref_a_removed_or_reordered_version_is_named_as_such(acme: Path) -> None:
    orders = acme / "avro" / "orders"
    (orders / "OrderPlaced.v3.avsc").write_text(json.dumps({**BREAKING_V3, "fields": [
        *BREAKING_V3["fields"][:3], {"name": "channel", "type": "string", "default": "web"}]}))
    git(acme, "init", "-q")
    git(acme, "add", ".")
    git(acme, "commit", "-q", "-m", "published")
    (orders / "OrderPlaced.v2.avsc").rename(orders / "OrderPlaced.v2.avsc.bak")
    code, out, _ = run("--against", "HEAD", "--format", "json")
    history = [(f["rule"], f["versions"], f["file"]) for f in json.loads(out)["findings"]
               if f["rule"].startswith("published-")]
    # one finding for the removed file, not "v2 changed into v3" and "v3 gone"
    assert code == 1 and history == [("published-version-removed", "v2", "avro/orders/OrderPlaced.v2.avsc")], out
    (orders / "OrderPlaced.v2.avsc.bak").rename(orders / "OrderPlaced.v2.avsc")
    assert run("--against", "HEAD")[0] == 0
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text().replace('"payments/payment-first.avsc", "payments/payment-second.avsc"',
                                           '"payments/payment-second.avsc", "payments/payment-first.avsc"'))
    code, out, _ = run("--against", "HEAD", "--format", "json", "--subject", "payments-value")
    history = [f for f in json.loads(out)["findings"] if f["rule"].startswith("published-")]
    assert code == 1 and len(history) == 1 and "keep their order" in history[0]["message"], out


def test_against_origin_main_in_a_shallow_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    origin = tmp_path / "origin"
    shutil.copytree(FIXTURE, origin)
    git(origin, "init", "-q")
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "published")
    git(origin, "checkout", "-q", "-b", "feature")
    break_orders(origin)
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "v3")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth=1", "--single-branch", "--branch", "feature", origin.as_uri(), "clone")
    monkeypatch.chdir(clone)
    with pytest.raises(subprocess.CalledProcessError):
        git(clone, "rev-parse", "--verify", "origin/main")
    code, out, err = run("--against", "origin/main")
    assert code == 1 and "(reader-field-missing-default)" in out, out + err  # fetched, then compared
    git(clone, "rev-parse", "--verify", "origin/main")
    git(clone, "update-ref", "-d", "refs/remotes/origin/main")
    git(clone, "remote", "set-url", "origin", (tmp_path / "gone").as_uri())
    code, _, err = run("--against", "origin/main")
    assert code == 2
    assert "run: git fetch --no-tags --depth=1 origin +refs/heads/main:refs/remotes/origin/main" in err


def test_pre_commit_hook_and_action_run_the_gate(acme: Path) -> None:
    hook = next(h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
                if h["id"] == "casestream-schemas-check")
    assert hook["id"] == "casestream-schemas-check" and hook["pass_filenames"] is False
    entry = shlex.split(hook["entry"])
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(entry, cwd=acme, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    break_orders(acme)
    done = subprocess.run(entry, cwd=acme, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "reader-field-missing-default" in done.stdout
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert "casestream schemas check" in action["runs"]["steps"][-1]["run"]


def test_python_m_casestream_cli_runs_the_check(acme: Path) -> None:
    break_orders(acme)
    done = subprocess.run([sys.executable, "-m", "casestream.cli", "schemas", "check", "--format", "json"],
                          cwd=acme, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["errors"] >= 1


def test_output_file_holds_the_report(acme: Path) -> None:
    break_orders(acme)
    code, out, _ = run("--format", "sarif", "-o", "gate.sarif")
    assert code == 1 and out == ""
    doc = json.loads((acme / "gate.sarif").read_text())
    assert doc["version"] == "2.1.0" and doc["runs"][0]["results"][0]["ruleId"] == "reader-field-missing-default"


def test_topic_name_strategy_value_and_key_subjects(acme: Path) -> None:
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text().replace('naming_strategy = "TopicRecordNameStrategy"',
                                           'naming_strategy = "TopicNameStrategy"'))
    code, out, _ = run("--format", "json")
    assert code == 0 and "shipping-value" in json.loads(out)["subject_names"]
    cfg.write_text(cfg.read_text().replace('topic = "shipping"', 'topic = "shipping"\nkey = true'))
    code, out, _ = run("--format", "json")
    assert code == 0 and "shipping-key" in json.loads(out)["subject_names"]


def test_a_primitive_key_schema_file_is_a_schema(acme: Path) -> None:
    # a key subject's schema is often a primitive: the file holds the JSON string "string"
    keys = acme / "keys"
    keys.mkdir()
    (keys / "OrderKey.v1.avsc").write_text('"int"\n')
    (keys / "OrderKey.v2.avsc").write_text('{"type": "long"}\n')
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text() + '\n[[folders]]\npath = "keys"\nnaming_strategy = "TopicNameStrategy"\n'
                                      'topic = "orders"\nkey = true\n')
    code, out, err = run("--format", "json")
    assert code == 0 and "orders-key" in json.loads(out)["subject_names"], out + err
    (keys / "OrderKey.v3.avsc").write_text('"string"\n')
    code, out, err = run("--format", "json")
    assert code == 1, out + err
    findings = json.loads(out)["findings"]  # BACKWARD_TRANSITIVE: v1->v3 and v2->v3
    assert {(f["subject"], f["rule"], f["versions"]) for f in findings} == {
        ("orders-key", "type-mismatch", "v1->v3"), ("orders-key", "type-mismatch", "v2->v3")}


@pytest.mark.parametrize("primitive", ["null", "boolean", "int", "long", "float", "double", "bytes", "string"])
def test_every_primitive_schema_file_checks(acme: Path, primitive: str) -> None:
    # Avro spec, "Schemas": a JSON string naming a primitive type is a whole schema ("null" too)
    (acme / "keys").mkdir()
    (acme / "keys" / "v1.avsc").write_text(f'"{primitive}"\n')
    (acme / "keys" / "v2.avsc").write_text(f'{{"type": "{primitive}"}}\n')
    cfg = acme / "casestream-schemas.toml"
    cfg.write_text(cfg.read_text() + '\n[[folders]]\npath = "keys"\npattern = "v{version}.avsc"\n'
                                      'naming_strategy = "TopicNameStrategy"\ntopic = "orders"\nkey = true\n')
    code, out, err = run("--format", "json", "--subject", "orders-key")
    assert code == 0 and json.loads(out)["versions"] == 2, out + err
