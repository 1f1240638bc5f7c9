"""`casestream replay --list` against a Kafka address nothing listens on: one error line and
exit 1, not hundreds of librdkafka connection logs and exit 0."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from casestream.cli.replay import replay


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_kafka_is_one_line_and_exit_1(capfd: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    r = CliRunner().invoke(replay, ["--list"], env={
        "CASESTREAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
        "CASESTREAM_PG_URL": f"postgresql://postgres@127.0.0.1:{_closed_port()}"})
    assert r.exit_code == 1
    assert f"Error: Kafka at 127.0.0.1:{port} (CASESTREAM_KAFKA_BOOTSTRAP) did not answer" in r.output
    assert "lag: unknown (Kafka unreachable)" in r.output
    assert "FAIL" not in capfd.readouterr().err  # librdkafka's own log lines stay out
