"""Differential test of the schema gate against Apache Avro's Java ``SchemaCompatibility``.

Every pair of tests/oracle/pairs.py is checked in both directions (BACKWARD: the new schema
reads data of the old; FORWARD: the old reads the new) by the gate (single-schema rules on
both, then :func:`casestream.schemacheck.check_pair`), by Java (one JVM for all checks:
tests/oracle/AvroCompat.java, avro jar from Maven Central), and by decoding a datum
generated from the writer schema with the reader schema (fastavro). A check fails when:

* the gate says compatible and Java does not, or the decode fails (the gate is never laxer);
* the gate says incompatible, Java says compatible, and a rule the gate gave is not one of its
  documented stricter rules (``Rule.stricter``).

The agreement rates are printed (``pytest -s``) and written to .local/avro-oracle/agreement.json.
Needs java, javac and mvn (Maven fetches the jar once into ~/.m2); marked integration.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from casestream.schemacheck import RULES, check_pair, lint_schema, parse_avro
from casestream.schemacheck.compat import parse_fastavro
from tests.oracle.oracle import WORK, decode, java_verdicts
from tests.oracle.pairs import corpus

pytestmark = pytest.mark.timeout(900)

STRICTER = {r.id for r in RULES.values() if r.stricter}
#: single-schema rules that mean "this schema is invalid" (Java's parser rejects it too)
INVALID_RULES = {"invalid-default", "enum-default-not-symbol", "union-default-not-first-branch"}


def gate_verdict(reader, writer, refs) -> tuple[str, set[str]]:  # noqa: ANN001
    rules = {i.rule for s in (reader, writer) for i in lint_schema(s, require_namespace=False)}
    try:
        for s in (reader, writer):
            parse_fastavro(s, references=refs)
        r, w = parse_avro(reader, references=refs), parse_avro(writer, references=refs)
    except Exception:  # noqa: BLE001 - either parser rejects the schema
        return "INVALID", rules | {"parse"}
    if rules & INVALID_RULES:
        return "INVALID", rules
    rules |= {i.rule for i in check_pair(r, w)}
    return ("INCOMPATIBLE" if rules else "COMPATIBLE"), rules


@pytest.fixture(scope="module")
def results() -> list[dict]:
    checks = []
    for p in corpus():
        for direction, reader, writer in (("BACKWARD", p.new, p.old), ("FORWARD", p.old, p.new)):
            checks.append({"id": f"{p.id}:{direction}", "refs": list(p.refs), "reader": reader, "writer": writer})
    java = java_verdicts(checks)
    out = []
    for c in checks:
        verdict, rules = gate_verdict(c["reader"], c["writer"], c["refs"])
        decoded = decode(c["reader"], c["writer"], c["refs"]) if verdict != "INVALID" else "-"
        out.append({**c, "gate": verdict, "rules": sorted(rules), "java": java[c["id"]]["verdict"],
                    "java_detail": java[c["id"]]["detail"], "decode": decoded})
    return out


def classify(r: dict) -> str:
    gate, java = r["gate"], r["java"]
    if gate == java:
        return "agree"
    if gate == "COMPATIBLE":
        return "gate-laxer"
    if java == "COMPATIBLE":
        return "stricter-rule" if set(r["rules"]) <= STRICTER else "disagree"
    return "both-reject"  # one says invalid schema, the other incompatible pair: both refuse it


def test_corpus_covers_every_kind_of_change() -> None:
    pairs = corpus()
    assert len(pairs) >= 150
    kinds = {p.id.split("/")[0] for p in pairs}
    assert kinds >= {"fields", "defaults", "promotions", "enums", "unions", "nested", "recursive", "collections",
                     "fixed", "aliases", "namespaces", "logical", "references"}


def test_gate_agrees_with_avro_java_except_documented_stricter_rules(results: list[dict]) -> None:
    counts = Counter(classify(r) for r in results)
    decode_checked = [r for r in results if r["gate"] == "COMPATIBLE"]
    decode_ok = sum(r["decode"] == "ok" for r in decode_checked)
    incompatible_decoded = [r for r in results if r["gate"] == "INCOMPATIBLE" and r["decode"] != "ok"]
    summary = {
        "pairs": len(results) // 2, "checks": len(results), **counts,
        "agreement_rate": round(counts["agree"] / len(results), 4),
        "agreement_or_stricter_rate": round(
            (counts["agree"] + counts["both-reject"] + counts["stricter-rule"]) / len(results), 4),
        "stricter_rules_used": sorted({x for r in results if classify(r) == "stricter-rule" for x in r["rules"]}),
        "compatible_decoded": f"{decode_ok}/{len(decode_checked)}",
        "incompatible_that_also_failed_to_decode": len(incompatible_decoded),
    }
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "agreement.json").write_text(json.dumps({"summary": summary, "checks": results}, indent=1))
    print("avro oracle:", json.dumps(summary))
    bad = [f"{r['id']}: gate {r['gate']} {r['rules']} / java {r['java']} {r['java_detail'][:200]}"
           for r in results if classify(r) in ("gate-laxer", "disagree")]
    assert not bad, "\n".join(bad)


def test_a_compatible_verdict_decodes(results: list[dict]) -> None:
    bad = [f"{r['id']}: {r['decode']}" for r in results if r["gate"] == "COMPATIBLE" and r["decode"] != "ok"]
    assert not bad, "\n".join(bad)
