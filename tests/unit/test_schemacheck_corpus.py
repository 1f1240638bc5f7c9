"""Corpus of schema histories with known verdicts per compatibility level (tests/unit/schemacheck_corpus/*.json).

Each file: ``doc``, ``versions`` (schemas, oldest first) and either ``expect`` (level ->
exact set of ``rule@path`` findings over every step of the history; [] = compatible) or
``lint`` (single-schema findings of the last version).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casestream.schemacheck import check_history, lint_schema, parse_avro

CORPUS = Path(__file__).parent / "schemacheck_corpus"


def _cases() -> list:
    out = []
    for path in sorted(CORPUS.glob("*.json")):
        case = json.loads(path.read_text())
        for level, expected in case.get("expect", {}).items():
            out.append(pytest.param(path.stem, case, level, expected, id=f"{path.stem}-{level}"))
        if "lint" in case:
            out.append(pytest.param(path.stem, case, "lint", case["lint"], id=f"{path.stem}-lint"))
    return out


def test_corpus_is_big_enough() -> None:
    pairs = [p for p in CORPUS.glob("*.json") if "expect" in json.loads(p.read_text())]
    assert len(pairs) >= 15


@pytest.mark.parametrize(("name", "case", "level", "expected"), _cases())
def test_corpus_verdict(name: str, case: dict, level: str, expected: list[str]) -> None:
    if level == "lint":
        issues = lint_schema(case["versions"][-1])
        found = {f"{i.rule}@{i.path}" for i in issues}
    else:
        schemas = [parse_avro(v) for v in case["versions"]]
        found = {f"{i.rule}@{i.path}" for _, issues in check_history(schemas, level) for i in issues}
    assert found == set(expected), f"{name} ({case['doc']}) under {level}"


@pytest.mark.parametrize(
    "path", [p for p in sorted(CORPUS.glob("*.json")) if "expect" in json.loads(p.read_text())], ids=lambda p: p.stem
)
def test_compatible_verdicts_agree_with_the_avro_checker(path: Path) -> None:
    """Where the corpus says compatible, Apache avro's checker must agree (we only ever add rules)."""
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    case = json.loads(path.read_text())
    schemas = [parse_avro(v) for v in case["versions"]]
    for level, expected in case.get("expect", {}).items():
        if expected:
            continue
        for pair, _ in check_history(schemas, level):
            verdict = ReaderWriterCompatibilityChecker().get_compatibility(schemas[pair.reader], schemas[pair.writer])
            assert verdict.compatibility is SchemaCompatibilityType.compatible, (path.stem, level, pair)
