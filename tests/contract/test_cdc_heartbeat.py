"""CDC heartbeats and slot alerts: the shipped connector configuration advances the slot of an
idle outbox (a heartbeat action query on a captured table, whose UPDATEs never reach Kafka),
and the slot-lag and reused-event-id alerts fire on series shaped like /metrics (promtool
test rules). The Debezium run itself is ``make test-debezium``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from casestream.outbox.cdc import CDC_HEARTBEAT_DDL, CDC_HEARTBEAT_TABLE
from casestream.outbox.connect import outbox_connector_config

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
GIB = 2**30


def test_the_connector_updates_a_captured_heartbeat_row_that_never_reaches_kafka() -> None:
    cfg = outbox_connector_config("case")
    query = cfg["heartbeat.action.query"]
    assert query.upper().startswith("UPDATE ") and CDC_HEARTBEAT_TABLE in query
    assert f"public.{CDC_HEARTBEAT_TABLE}" in cfg["table.include.list"].split(",")
    assert "u" in cfg["skipped.operations"].split(",")  # the heartbeat UPDATE is not an event
    assert 0 < int(cfg["heartbeat.interval.ms"]) <= 10_000
    assert CDC_HEARTBEAT_TABLE in CDC_HEARTBEAT_DDL and "INSERT INTO" in CDC_HEARTBEAT_DDL


def _promtool() -> str:
    path = subprocess.run([str(REPO / "deploy" / "prometheus" / "tools.sh"), "path"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if not Path(path).is_file():
        pytest.fail(f"promtool not built at {path} -- run `make prometheus-tools`.", pytrace=False)
    return path


def _url(name: str) -> str:
    """The rule's own runbook_url (its base is the deployer's), checked to end in its anchor."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    url = next(r for r in rules if r.get("alert") == name)["annotations"]["runbook_url"]
    assert url.endswith("#" + name.lower())
    return str(url)


def test_slot_and_reused_id_alerts_fire_on_metrics_series(tmp_path: Path) -> None:
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # 3 GiB of lag for 15 minutes on one slot, 100 MiB on another
                {"series": 'outbox_cdc_lag_bytes{slot="s_far",instance="a"}', "values": f"{3 * GIB}x15"},
                {"series": 'outbox_cdc_lag_bytes{slot="s_near",instance="a"}', "values": f"{100 * 2**20}x15"},
                # 1 GiB of WAL left before max_slot_wal_keep_size invalidates s_far; 50 GiB for s_near
                {"series": 'outbox_cdc_slot_safe_wal_bytes{slot="s_far",instance="a"}', "values": f"{GIB}x15"},
                {"series": 'outbox_cdc_slot_safe_wal_bytes{slot="s_near",instance="a"}',
                 "values": f"{50 * GIB}x15"},
                {"series": 'consumer_messages_total{consumer="c1",outcome="reused_ids",instance="a"}',
                 "values": "0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1"},
                {"series": 'consumer_messages_total{consumer="c2",outcome="reused_ids",instance="a"}',
                 "values": "0x15"},
            ],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "CasestreamCdcSlotLagHigh",
                 "exp_alerts": [{"exp_labels": {"slot": "s_far", "severity": "warn"}, "exp_annotations": {
                     "summary": "CDC slot s_far holds 3GiB of WAL behind its confirmed LSN",
                     "runbook_url": _url("CasestreamCdcSlotLagHigh")}}]},
                {"eval_time": "5m", "alertname": "CasestreamCdcSlotNearInvalidation",
                 "exp_alerts": [{"exp_labels": {"slot": "s_far", "severity": "page"}, "exp_annotations": {
                     "summary": "CDC slot s_far is 1GiB of WAL away from invalidation by max_slot_wal_keep_size",
                     "runbook_url": _url("CasestreamCdcSlotNearInvalidation")}}]},
                {"eval_time": "5m", "alertname": "CasestreamInboxReusedEventIds",
                 "exp_alerts": [{"exp_labels": {"consumer": "c1", "severity": "page"}, "exp_annotations": {
                     "summary": "consumer c1 received 1 message(s) reusing a recorded event id with other content",
                     "runbook_url": _url("CasestreamInboxReusedEventIds")}}]},
            ],
        }],
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests))
    proc = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
