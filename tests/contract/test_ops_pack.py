"""The ops pack: the Prometheus alert rules pass ``promtool check rules`` (promtool built from
the Go module proxy by ``deploy/prometheus/tools.sh``, ``make prometheus-tools``, a prerequisite
of ``make test``), every alert has its runbook entry, the Grafana dashboard is well-formed.
That the metrics they use exist on live services is checked in tests/e2e/test_console_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "casestream.json"
RUNBOOK = REPO / "docs" / "runbook.md"
RULE_TESTS = REPO / "deploy" / "prometheus" / "alerts_test.yml"
RUNBOOK_BASE = "https://runbooks.example.com/casestream/runbook.md"  # alerts.yml's placeholder
TOOLS = REPO / "deploy" / "prometheus" / "tools.sh"


def _promtool() -> str:
    path = subprocess.run([str(REPO / "deploy" / "prometheus" / "tools.sh"), "path"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if not Path(path).is_file():
        pytest.fail(f"promtool not built at {path} -- run `make prometheus-tools`.", pytrace=False)
    return path


def test_the_alert_rules_pass_promtool() -> None:
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: sum by (consumer (dead_letter_open)\n")
    assert subprocess.run([_promtool(), "check", "rules", str(bad)], capture_output=True).returncode != 0


def test_every_alert_has_a_runbook_entry_with_meaning_look_and_fix() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    text = RUNBOOK.read_text()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL))
    alerts = {r["alert"] for r in rules}
    assert {"CasestreamConsumerLagHigh", "CasestreamOutboxOldestPending", "CasestreamDeadLettersGrowing",
            "CasestreamSagasStuck", "CasestreamRelayFailures", "CasestreamServiceDown"} <= alerts
    for rule in rules:
        anchor = rule["alert"].lower()
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{anchor}"
        body = sections.get(anchor, "")
        for part in ("**Means:**", "**Look:**", "**Fix:**"):
            assert part in body, f"runbook entry {anchor} lacks {part}"


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_every_rule_passes_its_promtool_unit_tests() -> None:
    proc = subprocess.run([_promtool(), "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_on_series_named_as_on_metrics() -> None:
    from casestream.telemetry.metrics import METRIC_HELP

    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", ())
             if t.get("exp_alerts")}
    assert {r["alert"] for r in _rules()} <= fired
    names = {s["series"].split("{")[0] for case in tests for s in case["input_series"]}
    assert names - {"up"} <= set(METRIC_HELP), names - set(METRIC_HELP)


def test_every_alert_is_aggregated_per_logical_thing() -> None:
    for rule in _rules():
        assert re.search(r"\b(sum|max|min|count) by \((consumer|relay|job|slot)[,)]", rule["expr"]), rule["alert"]


def test_the_runbook_base_is_set_by_the_tools_script() -> None:
    out = subprocess.run([str(TOOLS), "rules", "https://git.example.org/ops/docs/runbook.md"],
                         capture_output=True, text=True, check=True).stdout
    rules = [r for g in yaml.safe_load(out)["groups"] for r in g["rules"]]
    assert {r["annotations"]["runbook_url"] for r in rules} == {
        f"https://git.example.org/ops/docs/runbook.md#{r['alert'].lower()}" for r in rules}
    bad = subprocess.run([str(TOOLS), "rules", "docs/runbook.md"], capture_output=True, text=True)
    assert bad.returncode != 0 and "rules wants BASE, an http(s) URL" in bad.stderr


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
