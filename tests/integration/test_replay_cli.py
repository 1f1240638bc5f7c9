"""``casestream replay`` command against the real Kafka, registry and PostgreSQL.

Reads the suite's real topics (read-only: no consumer group, no commits, nothing produced)
and writes only into a private database given with ``--dsn``.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from casestream.cli.replay import replay
from tests.integration.test_replay_support import private_database


@pytest.fixture
def env(kafka_bootstrap: str, registry_url: str, pg_url: str) -> dict[str, str]:
    return {"CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "CASESTREAM_REGISTRY_URL": registry_url,
            "CASESTREAM_PG_URL": pg_url}


def test_list_shows_every_projection_with_topics_and_freshness(env: dict[str, str]) -> None:
    r = CliRunner().invoke(replay, ["--list"], env=env)
    assert r.exit_code == 0, r.output
    for name, topic in (("audit.timeline", "outbox.event.notice"),
                        ("case.dashboard", "outbox.event.case"),
                        ("decision.statistics", "outbox.event.decision")):
        block = r.output.split(name, 1)[1]
        assert topic in block.split("\n\n")[0] and "last change:" in block


def test_usage_errors_exit_2(env: dict[str, str]) -> None:
    runner = CliRunner()
    assert runner.invoke(replay, [], env=env).exit_code == 2
    assert runner.invoke(replay, ["no.such"], env=env).exit_code == 2
    r = runner.invoke(replay, ["case.dashboard", "--from", "other.topic:0:5"], env=env)
    assert r.exit_code == 2 and "not read by this projection" in r.output


def test_dry_run_then_real_run_into_a_private_database(env: dict[str, str], pg_url: str) -> None:
    with private_database(pg_url) as dsn:
        runner = CliRunner()
        dry = runner.invoke(replay, ["decision.statistics", "--dry-run", "--dsn", dsn], env=env)
        assert dry.exit_code == 0, dry.output
        assert "outbox.event.decision[0] offsets" in dry.output and "events to read" in dry.output
        run = runner.invoke(replay, ["decision.statistics", "--dsn", dsn, "--batch-size", "3"],
                            env=env)
        assert run.exit_code == 0, run.output
        assert "swapped in" in run.output and "events/s" in run.output
        again = runner.invoke(replay, ["decision.statistics", "--dsn", dsn, "--to",
                                       "2000-01-01T00:00:00Z"], env=env)
        assert again.exit_code == 0, again.output
        assert "built in decision_statistics_shadow" in again.output
