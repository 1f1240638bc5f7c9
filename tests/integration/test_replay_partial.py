"""A replay over part of the history, and object names after a swap (real Kafka + PostgreSQL).

Fails if a partial replay (``--from`` a time) swaps its range over the live projection
without being asked (rows of earlier events silently gone), if ``merge`` loses rows of
events before the range, or if a swap leaves the live table with the shadow's index and
constraint names (``<table>_shadow_pkey``) instead of those its DDL defines.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from casestream.cli.replay import replay
from casestream.replay import Mode, PartialReplayRefused, ReplayOptions, parse_from
from tests.integration.test_replay import World, _caught_up, world  # noqa: F401 - fixture
from tests.integration.test_replay_support import history, table_rows
from casestream.testing.consumer import wait_until

OBJECTS = """
SELECT 'c:' || conname FROM pg_constraint WHERE conrelid = %(t)s::regclass
UNION ALL
SELECT 'i:' || ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = %(t)s::regclass
ORDER BY 1
"""


def _objects(dsn: str, table: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(OBJECTS, {"t": table}).fetchall()]


def _two_part_history(world: World) -> tuple[Any, str, list[dict], int]:
    """Live decision statistics over 12 journeys, 8 of them after a cut time: (spec, cut,
    live rows, events after the cut)."""
    early_cases, early = history(4)
    world.produce(early_cases, early)
    time.sleep(1.2)
    cut = datetime.fromtimestamp(time.time(), tz=UTC).isoformat()
    time.sleep(1.2)
    late_cases, late = history(8, first=4)
    world.produce(late_cases, late)
    spec = world.spec("decision.statistics")
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        spec.create_tables(conn, spec.live_names())
    rt = world.start_live(spec)
    wait_until(lambda: _caught_up(rt, len(early) + len(late)))
    world.stop_all()
    live = table_rows(world.dsn, "decision_statistics", "event_id")
    assert len(live) == len(early) + len(late)
    return spec, cut, live, len(late)


def test_a_partial_replay_is_refused_unless_merge_or_only_range_is_asked(world: World) -> None:
    spec, cut, live, late = _two_part_history(world)
    names_before = _objects(world.dsn, "decision_statistics")
    partial = ReplayOptions(start=parse_from(cut), batch_size=5)

    plan = world.replayer(spec).plan(partial)
    assert plan.mode == Mode.REFUSE and any("mode: refused" in line for line in plan.lines())
    with pytest.raises(PartialReplayRefused, match="--merge .* --only-range"):
        world.replayer(spec).run(partial)
    assert table_rows(world.dsn, "decision_statistics", "event_id") == live
    with psycopg.connect(world.dsn) as conn:
        assert conn.execute("SELECT to_regclass('decision_statistics_shadow')").fetchone()[0] is None

    merged = world.replayer(spec).run(ReplayOptions(start=parse_from(cut), batch_size=5, merge=True))
    assert merged.swapped and merged.read == late
    assert table_rows(world.dsn, "decision_statistics", "event_id") == live
    assert _objects(world.dsn, "decision_statistics") == names_before

    only = world.replayer(spec).run(ReplayOptions(start=parse_from(cut), batch_size=5,
                                                  only_range=True))
    assert only.swapped
    rows = table_rows(world.dsn, "decision_statistics", "event_id")
    assert len(rows) == late and all(r in live for r in rows)
    assert _objects(world.dsn, "decision_statistics") == names_before

    full = world.replayer(spec).run(ReplayOptions(batch_size=50))
    assert full.swapped and table_rows(world.dsn, "decision_statistics", "event_id") == live
    assert _objects(world.dsn, "decision_statistics") == names_before
    assert not any("shadow" in n for n in names_before)


def test_cli_partial_replay_refuses_in_one_line_with_exit_2(
        kafka_bootstrap: str, registry_url: str, pg_url: str) -> None:
    from tests.integration.test_replay_support import private_database

    env = {"CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_PG_URL": pg_url}
    with private_database(pg_url) as dsn:
        args = ["decision.statistics", "--dsn", dsn, "--from", "outbox.event.decision:0:1"]
        runner = CliRunner()
        dry = runner.invoke(replay, [*args, "--dry-run"], env=env)
        assert dry.exit_code == 0 and "mode: refused" in dry.output, dry.output
        r = runner.invoke(replay, args, env=env)
        assert r.exit_code == 2, r.output
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and "--merge" in lines[0] and "--only-range" in lines[0], r.output
        merge = runner.invoke(replay, [*args, "--merge", "--dry-run"], env=env)
        assert merge.exit_code == 0 and "mode: merge" in merge.output, merge.output
