"""End-to-end with Debezium publishing the case service's outbox: the five services as
processes, the case service switched to CDC (``casestream outbox handover --to cdc``, then
restarted with ``CASESTREAM_CASE_OUTBOX_PUBLISHER=cdc``: no relay), the suite's main flow,
and back to the relay. The e2e invariants hold: every case final, every audit trail complete
and in order, one notice per violating case."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from casestream.cli.outbox import outbox
from casestream.outbox.cdc import publisher, set_publisher
from casestream.service.devstack import ServiceStack
from services.demo import SUITE, case_mix, case_url, open_and_submit, wait_final
from test_suite_end_to_end import assert_journeys

pytestmark = pytest.mark.debezium

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def connect_url(infra_env: dict[str, str]) -> str:
    done = subprocess.run([str(ROOT / "deploy" / "infra.sh"), "up", "connect"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return f"http://127.0.0.1:{os.environ.get('CASESTREAM_CONNECT_PORT', '18083')}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, infra_env: dict[str, str]) -> Iterator[ServiceStack]:
    services = ServiceStack(env=infra_env, log_dir=tmp_path_factory.mktemp("e2e-dbz") / "logs")
    try:
        services.start_all(list(SUITE))
        yield services
    finally:
        services.stop_all()


def _case_dsn(pg_url: str) -> str:
    return pg_url.rstrip("/") + "/case"


def _handover(to: str, pg_url: str, connect_url: str, bootstrap: str, *extra: str) -> str:
    out = CliRunner().invoke(outbox, ["handover", "--to", to, "--dsn", _case_dsn(pg_url), "--connect-url",
                                      connect_url, "--bootstrap", bootstrap, "--timeout-s", "90", *extra])
    assert out.exit_code == 0, out.output
    return out.output


def _restart_case(stack: ServiceStack, **env: str) -> None:
    stack.stop("case")
    stack.env = {**{k: v for k, v in stack.env.items() if k != "CASESTREAM_CASE_OUTBOX_PUBLISHER"}, **env}
    stack.start("case")
    stack.wait_ready(["case"])


def test_main_flow_with_debezium_publishing_the_case_outbox(
        stack: ServiceStack, connect_url: str, pg_url: str, kafka_bootstrap: str, smtp_maildir: Path) -> None:
    try:
        print(_handover("cdc", pg_url, connect_url, kafka_bootstrap))
        _restart_case(stack, CASESTREAM_CASE_OUTBOX_PUBLISHER="cdc")
        with httpx.Client(timeout=10.0) as client:
            metrics = client.get(case_url("/metrics")).text
            assert "outbox_cdc_lag_bytes" in metrics and "relay_published_total" not in metrics
            runs = [open_and_submit(client, spec) for spec in case_mix(20)]
            wait_final(client, runs, timeout_s=180)
        assert_journeys(runs, smtp_maildir)
        with psycopg.connect(_case_dsn(pg_url)) as conn:
            assert publisher(conn) == "cdc"
            # Nothing the suite wrote was published by a relay: Debezium carried it all.
            assert conn.execute("SELECT count(*) FROM outbox WHERE status = 'published' AND "
                                "created_at > now() - interval '10 minutes' AND aggregatetype = 'case' "
                                "AND published_at > (SELECT changed_at FROM outbox_publisher)").fetchone()[0] == 0
        print(_handover("relay", pg_url, connect_url, kafka_bootstrap, "--drop-slot"))
    finally:
        with psycopg.connect(_case_dsn(pg_url), autocommit=True) as conn:
            if publisher(conn) == "cdc":  # a failure above: give the shared database back to the relay
                set_publisher(conn, "relay")
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'casestream_case_outbox' AND NOT active")
        _restart_case(stack)
    with httpx.Client(timeout=10.0) as client:  # and the relay publishes again
        runs = [open_and_submit(client, spec) for spec in case_mix(3, failures=0)]
        wait_final(client, runs, timeout_s=120)
    assert_journeys(runs, smtp_maildir)
