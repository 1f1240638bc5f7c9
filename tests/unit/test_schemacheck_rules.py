"""Every rule of the schema gate has a failing and a passing case.

Pair rules run through :func:`check_history` under a level; single-schema rules through
:func:`lint_schema`. Rules about a repository (its files, git history, registry, upcaster
chain) are exercised by tests/unit/test_schemacheck.py and test_schemacheck_repository.py,
listed in ``ELSEWHERE``; a rule in neither table fails :func:`test_every_rule_has_cases`.
"""

from __future__ import annotations

import pytest

from casestream.schemacheck import RULES, check_history, check_pair, lint_schema, parse_avro
from casestream.schemacheck import compat


def rec(*fields: dict, name: str = "R", ns: str = "t", **extra) -> dict:  # noqa: ANN003
    return {"type": "record", "name": name, "namespace": ns, "fields": list(fields), **extra}


def f(name: str, t, **extra) -> dict:  # noqa: ANN001, ANN003
    return {"name": name, "type": t, **extra}


ID = f("id", "string")
ENUM2 = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
ENUM3 = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}
FX = {"type": "fixed", "name": "H", "size": 4}

#: rule -> (level, failing [old, new], passing [old, new])
PAIR_CASES = {
    "reader-field-missing-default": ("BACKWARD", [rec(ID), rec(ID, f("x", "int"))],
                                     [rec(ID), rec(ID, f("x", "int", default=0))]),
    "field-removed-without-default": ("FORWARD", [rec(ID, f("x", "int")), rec(ID)],
                                      [rec(ID, f("x", "int", default=0)), rec(ID)]),
    "field-renamed-without-alias": ("BACKWARD", [rec(ID, f("x", "int")), rec(ID, f("y", "int"))],
                                    [rec(ID, f("x", "int")), rec(ID, f("y", "int", aliases=["x"]))]),
    "type-mismatch": ("BACKWARD", [rec(ID, f("x", "long")), rec(ID, f("x", "int"))],
                      [rec(ID, f("x", "int")), rec(ID, f("x", "long"))]),
    "name-mismatch": ("BACKWARD", [rec(ID), rec(ID, name="S")], [rec(ID), rec(ID, name="S", aliases=["R"])]),
    "fixed-size-mismatch": ("BACKWARD", [rec(f("h", FX)), rec(f("h", {**FX, "size": 8}))],
                            [rec(f("h", FX)), rec(f("h", dict(FX)))]),
    "missing-union-branch": ("BACKWARD", [rec(f("u", ["null", "int", "string"])), rec(f("u", ["null", "int"]))],
                             [rec(f("u", ["null", "int"])), rec(f("u", ["null", "int", "string"]))]),
    "enum-symbol-added-without-default": ("FORWARD", [rec(f("e", ENUM2)), rec(f("e", ENUM3))],
                                          [rec(f("e", {**ENUM2, "default": "A"})),
                                           rec(f("e", {**ENUM3, "default": "A"}))]),
    "enum-symbol-removed": ("BACKWARD", [rec(f("e", ENUM3)), rec(f("e", ENUM2))],
                            [rec(f("e", ENUM3)), rec(f("e", {**ENUM2, "default": "A"}))]),
    "logical-type-changed": ("BACKWARD", [rec(f("d", {"type": "int", "logicalType": "date"})),
                                          rec(f("d", {"type": "long", "logicalType": "timestamp-millis"}))],
                             [rec(f("d", {"type": "long", "logicalType": "timestamp-millis"})),
                              rec(f("d", {"type": "long", "logicalType": "timestamp-millis"}))]),
    "bytes-read-as-string": ("BACKWARD", [rec(f("b", "bytes")), rec(f("b", "string"))],
                             [rec(f("b", "string")), rec(f("b", "bytes"))]),
}

#: rule -> (failing schema, passing schema)
LINT_CASES = {
    "name-not-qualified": ({"type": "record", "name": "R", "fields": []}, rec()),
    "enum-default-not-symbol": (rec(f("e", {**ENUM2, "default": "Z"})), rec(f("e", {**ENUM2, "default": "A"}))),
    "union-default-not-first-branch": (rec(f("u", ["null", "string"], default="x")),
                                       rec(f("u", ["string", "null"], default="x"))),
    "invalid-default": (rec(f("b", "bytes", default="\u0100")), rec(f("b", "bytes", default="\u00ff"))),
}

ELSEWHERE = {
    "payload-name": "test_schemacheck.py::test_single_schema_rules_exit_1 / test_own_catalog_is_compatible_and_fast",
    "upcaster-missing": "test_schemacheck_repository.py::test_upcaster_rule_only_where_the_repository_declares_its_chain",
    "upcaster-target-missing": "test_schemacheck_renames.py::test_a_rename_into_a_type_the_repository_does_not_have",
    "upcaster-rename-incomplete": "test_schemacheck_renames.py::test_a_newer_version_of_a_renamed_type_needs_a_step_into_the_new_type",
    "published-version-changed": "test_schemacheck_repository.py::test_against_a_git_ref",
    "published-version-removed": "test_schemacheck.py::test_against_ref_detects_envelope_change_and_removed_version",
    "registry-version-unknown": "test_schemacheck.py::test_registry_check_clean_then_drift",
    "compatibility-level-mismatch": "test_schemacheck.py::test_registry_check_clean_then_drift",
    "incompatible": "test_the_safety_net_reports_what_the_walk_missed (below)",
}


def test_every_rule_has_cases() -> None:
    assert set(RULES) == set(PAIR_CASES) | set(LINT_CASES) | set(ELSEWHERE)


@pytest.mark.parametrize("rule", sorted(PAIR_CASES))
def test_pair_rule_fails_and_passes(rule: str) -> None:
    level, failing, passing = PAIR_CASES[rule]
    found = {i.rule for _, issues in check_history([parse_avro(s) for s in failing], level) for i in issues}
    assert rule in found, found
    found = {i.rule for _, issues in check_history([parse_avro(s) for s in passing], level) for i in issues}
    assert found == set(), found


@pytest.mark.parametrize("rule", sorted(LINT_CASES))
def test_lint_rule_fails_and_passes(rule: str) -> None:
    failing, passing = LINT_CASES[rule]
    assert rule in {i.rule for i in lint_schema(failing)}
    assert lint_schema(passing) == []


def test_the_safety_net_reports_what_the_walk_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = parse_avro(rec(ID)), parse_avro(rec(ID, f("x", "int")))
    monkeypatch.setattr(compat._Walker, "walk", lambda self, r, w, path: None)
    assert [i.rule for i in check_pair(new, old)] == ["incompatible"]
    assert check_pair(old, new) == []


def test_unqualified_alias_is_relative_to_the_namespace_of_the_type() -> None:
    old = rec(ID, name="Order", ns="com.acme")
    assert check_pair(parse_avro(rec(ID, name="Purchase", ns="com.acme", aliases=["Order"])), parse_avro(old)) == []
    moved = rec(ID, name="Purchase", ns="com.acme.v2", aliases=["Order"])  # aliases com.acme.v2.Order
    assert [i.rule for i in check_pair(parse_avro(moved), parse_avro(old))] == ["name-mismatch"]


def test_time_millis_to_time_micros_through_a_promotion() -> None:
    old = rec(f("t", {"type": "int", "logicalType": "time-millis"}))
    new = rec(f("t", {"type": "long", "logicalType": "time-micros"}))
    issues = check_pair(parse_avro(new), parse_avro(old))
    assert [i.rule for i in issues] == ["logical-type-changed"] and "int (read as long)" in issues[0].message


DATE = {"type": "int", "logicalType": "date"}
TS = {"type": "long", "logicalType": "timestamp-millis"}


@pytest.mark.parametrize(("old_type", "new_type", "rule"), [
    (DATE, ["null", TS], "logical-type-changed"),          # promotion into a reader union
    (["null", DATE], ["null", TS], "logical-type-changed"),  # promotion between union branches
    ("bytes", ["null", "string"], "bytes-read-as-string"),
    (["null", "bytes"], ["null", "string"], "bytes-read-as-string"),
])
def test_stricter_rules_follow_the_union_branch_avro_resolves_to(old_type, new_type, rule: str) -> None:  # noqa: ANN001
    # Avro spec, Schema Resolution: the writer's value is read by the first reader branch that
    # matches it, a promotion included (int is read by a long branch)
    old, new = rec(f("t", old_type)), rec(f("t", new_type, default=None))
    assert [i.rule for i in check_pair(parse_avro(new), parse_avro(old))] == [rule]
    assert check_pair(parse_avro(rec(f("t", new_type, default=None))), parse_avro(rec(f("t", new_type)))) == []


def test_an_exact_union_branch_wins_over_a_promotion() -> None:
    old = rec(f("t", DATE))
    new = rec(f("t", [TS, DATE]))  # int date is read by the int branch, not promoted to the long one
    assert check_pair(parse_avro(new), parse_avro(old)) == []


def test_references_resolve_named_types_across_files() -> None:
    money = rec(f("units", "long"), name="Money", ns="com.acme.common")
    v1 = rec(ID, f("m", "com.acme.common.Money"))
    v2 = rec(ID, f("m", "com.acme.common.Money"), f("note", ["null", "string"], default=None))
    assert check_pair(parse_avro(v2, references=[money]), parse_avro(v1, references=[money])) == []
    with pytest.raises(Exception, match="Money"):
        parse_avro(v1)


def test_stricter_rules_say_why() -> None:
    stricter = {r.id for r in RULES.values() if r.stricter}
    assert {"logical-type-changed", "bytes-read-as-string", "name-not-qualified", "upcaster-missing",
            "upcaster-target-missing", "upcaster-rename-incomplete"} <= stricter
    assert "reader-field-missing-default" not in stricter


#: (history, levels it passes) — transitive levels compare with every earlier version, not only the last
BACKWARD_ONLY_LAST = [rec(f("a", "int")), rec(f("a", "int"), f("b", "int", default=0)), rec(f("a", "int"), f("b", "int"))]
FORWARD_ONLY_LAST = [rec(f("a", "int"), f("c", "int")), rec(f("a", "int"), f("c", "int", default=0)), rec(f("a", "int"))]


@pytest.mark.parametrize(("history", "passes"), [
    (BACKWARD_ONLY_LAST, {"NONE", "BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"}),
    (FORWARD_ONLY_LAST, {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FULL"}),
], ids=["backward-only-last", "forward-only-last"])
def test_all_seven_levels(history: list[dict], passes: set[str]) -> None:
    from casestream.schemacheck import LEVELS

    assert len(LEVELS) == 7
    parsed = [parse_avro(s) for s in history]
    verdicts = {level for level in LEVELS
                if not any(issues for _, issues in check_history(parsed, level))}
    assert verdicts == passes


def test_canonical_form_ignores_layout_only() -> None:
    from casestream.schemacheck.compat import canonical

    a = rec(f("x", "int"), f("e", {"type": "enum", "name": "E", "symbols": ["A"]}))
    b = {"fields": [{"type": {"type": "int"}, "name": "x"},
                    {"name": "e", "type": {"symbols": ["A"], "name": "t.E", "type": "enum"}}],
         "name": "t.R", "type": "record"}
    assert canonical(a) == canonical(b)
    assert canonical(a) != canonical({**b, "doc": "changed"})
    assert canonical(a) != canonical({**b, "fields": list(reversed(b["fields"]))})  # field order is the layout


PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


@pytest.mark.parametrize("name", PRIMITIVES)
def test_a_primitive_schema_as_a_json_string_parses(name: str) -> None:
    # Avro spec, "Schemas": a schema is a JSON string naming a primitive type, an object or an
    # array; the file `"null"` parses to the Python str "null", which is not JSON text to re-read
    assert parse_avro(name).type == name
    assert compat.parse_fastavro(name) == name
    assert check_history([parse_avro(name), parse_avro({"type": name})], "FULL") == [
        (compat.PairCheck(reader=1, writer=0, direction="BACKWARD"), []),
        (compat.PairCheck(reader=0, writer=1, direction="FORWARD"), [])]


INNER = rec(ID, name="Inner")


@pytest.mark.parametrize(("old", "new"), [
    (f("u", ["null", INNER], default=None), f("u", ["null", rec(ID, f("x", "int"), name="Inner")], default=None)),
    (f("u", INNER), f("u", ["null", rec(ID, f("x", "int"), name="Inner")], default=None)),
    (f("u", ["null", INNER], default=None), f("u", ["null", {"type": "array", "items": "int"},
                                                      rec(ID, f("x", "int"), name="Inner")], default=None)),
], ids=["union-to-union", "record-to-union", "union-with-more-branches"])
def test_a_field_without_default_in_a_record_inside_a_union_is_named(old: dict, new: dict) -> None:
    issues = check_pair(parse_avro(rec(ID, new)), parse_avro(rec(ID, old)), labels=("v2", "v1"))
    assert [(i.rule, i.path) for i in issues] == [("reader-field-missing-default", "u.x")], issues
    assert "field `x` was added in v2 without a default" in issues[0].message


def test_a_writer_branch_no_reader_branch_reads_is_still_a_missing_union_branch() -> None:
    old = rec(ID, f("u", ["null", INNER, "string"], default=None))
    new = rec(ID, f("u", ["null", rec(ID, f("x", "int"), name="Inner")], default=None))
    rules = sorted((i.rule, i.path) for i in check_pair(parse_avro(new), parse_avro(old)))
    assert rules == [("missing-union-branch", "u"), ("reader-field-missing-default", "u.x")], rules
