"""The shipped Debezium connector files are the library's configuration, and both publishers
share one header contract (all five headers; a NULL column is a null-valued header)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casestream.cli.status import service_rows, service_status
from casestream.outbox import headers_for
from casestream.outbox.connect import SETTINGS_EXPLAINED, connector_name, outbox_connector_config

DEBEZIUM = Path(__file__).resolve().parents[2] / "deploy" / "debezium"
SERVICES_WITH_OUTBOX = ("case", "decision", "notification", "saga")


@pytest.mark.parametrize("database", SERVICES_WITH_OUTBOX)
def test_each_service_has_a_connector_file_equal_to_the_library_config(database: str) -> None:
    doc = json.loads((DEBEZIUM / f"{database}-outbox-connector.json").read_text())
    assert doc == {"name": connector_name(database), "config": outbox_connector_config(database)}


def test_the_config_drops_debezium_context_headers_and_is_tuned_for_latency() -> None:
    cfg = outbox_connector_config("case")
    assert cfg["extended.headers.enabled"] == "false"
    assert int(cfg["poll.interval.ms"]) <= 10
    assert int(cfg["max.queue.size"]) > int(cfg["max.batch.size"])
    assert "transforms.outbox.table.field.event.timestamp" not in cfg
    assert all(why for _name, _value, why in SETTINGS_EXPLAINED)


def test_relay_headers_are_all_five_with_null_for_a_null_column() -> None:
    assert headers_for("e1", "T", None, None, "c") == [
        ("id", b"e1"), ("type", b"T"), ("event_version", None), ("traceparent", None),
        ("correlation_id", b"c")]


def test_status_shows_cdc_unconfirmed_rows_when_no_relay_reports_pending() -> None:
    text = ('outbox_cdc_unconfirmed_total{slot="casestream_case_outbox"} 12\n'
            'outbox_cdc_oldest_unconfirmed_age_seconds{slot="casestream_case_outbox"} 3.5\n')
    row = service_status("case", text, "ready")
    assert row.outbox_cdc and row.outbox_pending == 12 and row.outbox_oldest_s == 3.5
    assert service_rows(row)[0][5] == "12 (cdc)"
