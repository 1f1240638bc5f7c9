"""Unit tests of ``casestream status``: parsing /metrics text and rendering the table."""

from __future__ import annotations

import json
import socket

import pytest

from casestream.service import discovery
from click.testing import CliRunner

from casestream.cli.status import parse_prometheus, render_table, service_status, status
from casestream.consumer.records import ConsumerStats
from casestream.outbox.relay.metrics import RelayMetrics
from casestream.telemetry.metrics import MetricsRegistry, render_prometheus
from casestream.telemetry.sources import Sources


def saga_metrics_text() -> str:
    sources = Sources()
    # 7 dead-lettered by this process, 2 of them still open on the topic: status shows 2
    lag = sources.add_consumer("saga.orchestrator", ConsumerStats(dead_lettered=7))
    sources.add_gauge("dead_letter_open", lambda: {(("consumer", "saga.orchestrator"),): 2})
    lag.messages["outbox.event.case"] = 5
    lag.seconds["outbox.event.case"] = 1.25
    sources.add_relay("saga.relay", RelayMetrics(outbox_pending_total=3,
                                                 outbox_oldest_pending_age_seconds=7.5))
    sources.add_gauge("saga_state_total", lambda: {(("state", "COMPLETED"),): 4,
                                                  (("state", "AWAITING_DECISION"),): 1})
    registry = MetricsRegistry("saga", sources)
    return render_prometheus(registry.collect())


def test_parse_prometheus_reads_labels_and_values() -> None:
    samples = parse_prometheus('# HELP x y\nx_total{a="1",b="q\\"z"} 3\nplain 2.5\nbad line\n')
    assert samples[("x_total", (("a", "1"), ("b", 'q\\"z')))] == 3
    assert samples[("plain", ())] == 2.5
    assert len(samples) == 2


def test_a_row_from_a_services_metrics() -> None:
    row = service_status("saga", saga_metrics_text(), "ready")
    assert row.consumer == "saga.orchestrator"
    assert (row.lag_messages, row.lag_seconds) == (5, 1.25)
    assert (row.outbox_pending, row.outbox_oldest_s, row.dead_letters) == (3, 7.5, 2)
    # the topics' open depth, when read, wins over the gauge
    assert service_status("saga", saga_metrics_text(), "ready",
                          open_dead_letters={"saga.orchestrator": 4}).dead_letters == 4
    assert row.sagas == {"COMPLETED": 4, "AWAITING_DECISION": 1}
    assert service_status("saga", saga_metrics_text(), "ready",
                          kafka_lag={"saga.orchestrator": 9}).lag_messages == 9


def test_table_has_one_line_per_service_and_marks_unknowns() -> None:
    rows = [service_status("saga", saga_metrics_text(), "ready"),
            service_status("audit", None, "down", consumers=("audit.journal",))]
    lines = render_table(rows).splitlines()
    assert lines[0].split()[:2] == ["SERVICE", "READY"]
    assert lines[1].split()[:8] == ["saga", "ready", "saga.orchestrator", "5", "1.2", "3", "7.5", "2"]
    assert "AWAITING_DECISION=1 COMPLETED=4" in lines[1]
    assert lines[2].split() == ["audit", "down", "audit.journal", "-", "-", "-", "-", "-", "-"]


def test_status_command_reports_services_that_do_not_answer_as_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    names = list(discovery.services())  # every installed service, the suite's five at least
    urls = [f"--url={name}=http://127.0.0.1:{port}" for name in names]
    result = CliRunner().invoke(status, [*urls, "--no-kafka", "--json"])
    assert result.exit_code == 1, result.output  # any service not ready: exit 1 (scripts)
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["ready"] for r in rows] == ["down"] * len(names) and len(names) >= 5


def test_status_shows_only_the_services_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    result = CliRunner().invoke(status, ["audit", "case", f"--url=case=http://127.0.0.1:{port}",
                                         f"--url=audit=http://127.0.0.1:{port}", "--no-kafka", "--json"])
    assert [json.loads(line)["service"] for line in result.output.splitlines()] == ["audit", "case"]
    assert result.exit_code == 1  # both down
    unknown = CliRunner().invoke(status, ["nope", "--no-kafka"])
    assert unknown.exit_code == 2 and "unknown service nope" in unknown.output
