"""The schema gate and event upcasters that rename or split an event type
(``UpcasterChain.add_event(..., produces=[...])``): the produced type's history continues the
old one's, a produced type or version the repository lacks is ``upcaster-target-missing``, and
a newer version of a renamed type that no step lifts into the new type is
``upcaster-rename-incomplete``. Run on a small team repository (casestream-schemas.toml, a
folder of ``<Name>.v<N>.avsc``) through the CLI as CI runs it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from casestream.cli.schemas import schemas

#: The team's chain: OrderPlaced v1 renamed to OrderSubmitted, OrderUpdated v1 split in two.
CHAIN = '''
import dataclasses
from casestream.events import UpcasterChain


def rename(event):
    yield dataclasses.replace(event, event_type="OrderSubmitted", event_version=1)


def split(event):
    yield dataclasses.replace(event, event_type="OrderRenamed", event_version=1, payload={"name": event.payload["name"]})
    yield dataclasses.replace(event, event_type="OrderRepriced", event_version=1, payload={"price": event.payload["price"]})


def chain():
    c = UpcasterChain()
    c.add_event("OrderPlaced", 1, rename, produces=[("OrderSubmitted", 1)])
    c.add_event("OrderUpdated", 1, split, produces=[("OrderRenamed", 1), ("OrderRepriced", REPRICED)])
    EXTRA
    return c
'''

FIELDS = {"OrderPlaced": ["order_id"], "OrderSubmitted": ["order_id"], "OrderUpdated": ["name", "price"],
          "OrderRenamed": ["name"], "OrderRepriced": ["price"]}


def schema(name: str, *extra: str) -> str:
    fields = [{"name": f, "type": "string"} for f in FIELDS[name]]
    fields += [{"name": f, "type": ["null", "string"], "default": None} for f in extra]
    return json.dumps({"type": "record", "name": name, "namespace": "com.acme.orders", "fields": fields}, indent=2)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "team"
    (root / "avro").mkdir(parents=True)
    for name in FIELDS:
        (root / "avro" / f"{name}.v1.avsc").write_text(schema(name))
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    chain_module(root)
    return root


def chain_module(root: Path, *, repriced: int = 1, extra: str = "pass") -> None:
    """Write the chain under a fresh module name (the gate caches a chain per reference)."""
    module = f"team_chain_{uuid.uuid4().hex}"
    (root / f"{module}.py").write_text(CHAIN.replace("REPRICED", str(repriced)).replace("EXTRA", extra))
    (root / "casestream-schemas.toml").write_text(
        f'compatibility = "BACKWARD_TRANSITIVE"\nnaming_strategy = "RecordNameStrategy"\n'
        f'upcasters = "{module}:chain"\n\n[[folders]]\npath = "avro"\npattern = "{{name}}.v{{version}}.avsc"\n')


def check(*args: str) -> tuple[int, list[dict], str]:
    result = CliRunner().invoke(schemas, ["check", "--format", "json", *args])
    findings = json.loads(result.stdout)["findings"] if result.stdout.strip().startswith("{") else []
    return result.exit_code, findings, result.stdout + result.stderr


def rules(findings: list[dict]) -> list[tuple[str, str, str]]:
    return sorted((f["rule"], f["subject"], f["versions"]) for f in findings)


def test_a_rename_and_a_split_continue_the_old_types_history(repo: Path) -> None:
    code, findings, out = check()
    assert (code, findings) == (0, []), out
    # a newer version of the rename target still needs its own step (the existing rule, kept)
    (repo / "avro" / "OrderSubmitted.v2.avsc").write_text(schema("OrderSubmitted", "channel"))
    code, findings, _ = check()
    assert code == 1 and rules(findings) == [("upcaster-missing", "com.acme.orders.OrderSubmitted", "v1->v2")]


def test_a_rename_into_a_type_the_repository_does_not_have(repo: Path) -> None:
    (repo / "avro" / "OrderSubmitted.v1.avsc").unlink()
    code, findings, _ = check()
    assert code == 1 and rules(findings) == [
        ("upcaster-target-missing", "com.acme.orders.OrderPlaced", "v1->OrderSubmitted v1")]
    (f,) = findings
    assert "produces OrderSubmitted v1" in f["message"] and "no subject has event type OrderSubmitted" in f["message"]
    assert f["file"] == "avro/OrderPlaced.v1.avsc" and "produces=[...]" in f["hint"]


def test_a_split_into_a_version_the_repository_does_not_have(repo: Path) -> None:
    chain_module(repo, repriced=2)
    code, findings, _ = check()
    assert code == 1 and rules(findings) == [
        ("upcaster-target-missing", "com.acme.orders.OrderUpdated", "v1->OrderRepriced v2")]
    assert "OrderRepriced has v1..v1" in findings[0]["message"]


def test_a_newer_version_of_a_renamed_type_needs_a_step_into_the_new_type(repo: Path) -> None:
    (repo / "avro" / "OrderPlaced.v2.avsc").write_text(schema("OrderPlaced", "channel"))
    code, findings, _ = check()
    assert code == 1 and rules(findings) == [
        ("upcaster-rename-incomplete", "com.acme.orders.OrderPlaced", "v2->OrderSubmitted")]
    (f,) = findings
    assert "v2 events are never read as OrderSubmitted" in f["message"] and f["file"] == "avro/OrderPlaced.v2.avsc"
    assert "add_event" in f["hint"]
    # the text format carries the id, the reason and the hint
    result = CliRunner().invoke(schemas, ["check"])
    assert "(upcaster-rename-incomplete)" in result.stdout and "add an event step" in result.stdout
    assert check("--ignore", "upcaster-rename-incomplete:com.acme.orders.OrderPlaced")[0] == 0
    # upcasting the newer version into the rename target as well fixes it
    chain_module(repo, extra='c.add_event("OrderPlaced", 2, rename, produces=[("OrderSubmitted", 1)])')
    code, findings, out = check()
    assert (code, findings) == (0, []), out


def test_only_subjects_asked_for_are_checked_but_targets_are_found_in_the_whole_repository(repo: Path) -> None:
    assert check("--subject", "com.acme.orders.OrderPlaced")[:2] == (0, [])
    (repo / "avro" / "OrderRenamed.v1.avsc").unlink()
    assert check("--subject", "com.acme.orders.OrderPlaced")[:2] == (0, [])
    code, findings, _ = check("--subject", "com.acme.orders.OrderUpdated")
    assert code == 1 and rules(findings) == [
        ("upcaster-target-missing", "com.acme.orders.OrderUpdated", "v1->OrderRenamed v1")]


def test_the_suites_split_of_case_updated_is_checked_in_its_catalog(tmp_path: Path) -> None:
    import re
    import shutil

    from casestream.schemacheck.runner import check_catalog
    from services import schemas_dir

    assert check_catalog(schemas_dir()).findings == []
    copy = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), copy)
    toml = copy / "catalog.toml"
    # drop the CaseReprioritized subject and its file: split_case_updated still produces it
    toml.write_text(re.sub(r'\[subjects\."casestream\.case\.CaseReprioritized"\][^\[]*', "", toml.read_text()))
    (copy / "case" / "CaseReprioritized.v1.avsc").unlink()
    assert rules([_as_dict(f) for f in check_catalog(copy).findings]) == [
        ("upcaster-target-missing", "casestream.case.CaseUpdated", "v1->CaseReprioritized v1")]


def _as_dict(finding: object) -> dict:
    return {k: getattr(finding, k) for k in ("rule", "subject", "versions")}
