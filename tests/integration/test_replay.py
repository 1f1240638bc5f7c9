"""Replay against the real Kafka and PostgreSQL. Each test has its own topics,
consumer names and database (``test_replay_support.private_database``).

History: case journeys (CaseOpened in schema v1, v2 and v3, submitted, closed/returned) on a
private case topic and their decisions on a private decision topic. Live projections are run
by the real ``ConsumerRuntime`` in LIVE mode; replays by ``casestream.replay.Replayer``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.testing.consumer import (
    create_topic,
    produce,
    produce_events,
    run_in_thread,
    wait_until,
)
from casestream.handlers.registry import HandlerKind
from casestream.replay import ReplayOptions, Replayer, checkpoint, load_projection, parse_to
from tests.integration.test_replay_support import (
    history,
    journey,
    live_runtime,
    private_database,
    private_spec,
    table_rows,
)
from services import schemas_dir

EVENT_TYPES = load_catalog(schemas_dir()).event_types
SUPPORT = Path(__file__).with_name("test_replay_support.py")


@pytest.fixture(scope="module")
def codec(registry_codec: Any) -> Any:
    """These tests decode with the real registry codec (conftest ``registry_codec``)."""
    return registry_codec


@dataclasses.dataclass
class World:
    bootstrap: str
    dsn: str
    codec: Any
    case_topic: str
    decision_topic: str
    sfx: str
    pool: Any
    threads: list[tuple[Any, Any, Any]] = dataclasses.field(default_factory=list)

    def spec(self, name: str) -> Any:
        topic = self.case_topic if name != "decision.statistics" else self.decision_topic
        return private_spec(load_projection(name), [topic], self.dsn, f"{name}-{self.sfx}")

    def produce(self, cases: list[Any], decisions: list[Any]) -> None:
        produce_events(self.bootstrap, self.case_topic, self.codec, cases)
        produce_events(self.bootstrap, self.decision_topic, self.codec, decisions)

    def start_live(self, spec: Any, **kw: Any) -> Any:
        rt = live_runtime(spec, self.codec, self.pool, self.bootstrap, **kw)
        thread, stop = run_in_thread(rt)
        self.threads.append((rt, thread, stop))
        assert rt.ready.wait(30), "live consumer got no assignment"
        return rt

    def run_live_until(self, name: str, applied: int) -> Any:
        """Create projection ``name``'s live tables, run it live until it has taken
        ``applied`` events, stop every live runtime; return the projection's spec."""
        spec = self.spec(name)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            spec.create_tables(conn, spec.live_names())
        rt = self.start_live(spec)
        wait_until(lambda: _caught_up(rt, applied))
        self.stop_all()
        return spec

    def stop_all(self) -> None:
        for _rt, thread, stop in self.threads:
            stop.set()
            thread.join(30)
        for _rt, thread, _stop in self.threads:
            assert not thread.errors, thread.errors
        self.threads.clear()

    def replayer(self, spec: Any) -> Replayer:
        return Replayer(spec, codec=self.codec, dsn=self.dsn, bootstrap=self.bootstrap,
                        event_types=EVENT_TYPES)


@pytest.fixture
def world(kafka_bootstrap: str, pg_url: str, codec: Any) -> Iterator[World]:
    sfx = uuid.uuid4().hex[:10]
    case_topic, decision_topic = f"test.replay.{sfx}.case", f"test.replay.{sfx}.decision"
    create_topic(kafka_bootstrap, case_topic, 3)
    create_topic(kafka_bootstrap, decision_topic, 2)
    with private_database(pg_url) as dsn:
        pool = ConnectionPool(dsn, min_size=1, max_size=4, open=True)
        w = World(kafka_bootstrap, dsn, codec, case_topic, decision_topic, sfx, pool)
        try:
            yield w
        finally:
            w.stop_all()
            pool.close()


def _caught_up(rt: Any, n: int) -> bool:
    s = rt.stats
    return s.applied + s.duplicates + s.stale >= n


def test_rebuilt_projections_equal_live_row_for_row(world: World) -> None:
    cases, decisions = history(60)
    world.produce(cases, decisions)
    dash, stats = world.spec("case.dashboard"), world.spec("decision.statistics")
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        dash.create_tables(conn, dash.live_names())
        stats.create_tables(conn, stats.live_names())
    rd, rs = world.start_live(dash), world.start_live(stats)
    wait_until(lambda: _caught_up(rd, len(cases)) and _caught_up(rs, len(decisions)))
    world.stop_all()
    live_dash = table_rows(world.dsn, "case_dashboard", "case_id")
    live_stats = table_rows(world.dsn, "decision_statistics", "event_id")
    assert len(live_dash) == 60 and len(live_stats) == 45

    r1 = world.replayer(dash).run(ReplayOptions(batch_size=37, workers=2))  # forked workers
    r2 = world.replayer(stats).run(ReplayOptions(batch_size=7))
    assert r1.swapped and r2.swapped and r1.read == len(cases) and r2.read == len(decisions)
    assert table_rows(world.dsn, "case_dashboard", "case_id") == live_dash
    assert table_rows(world.dsn, "decision_statistics", "event_id") == live_stats
    with psycopg.connect(world.dsn) as conn:
        # upcasters: v1 CaseOpened had no priority -> NORMAL; v2 kept LOW; v3 HIGH
        prios = dict(conn.execute("SELECT priority, count(*) FROM case_dashboard"
                                  " GROUP BY 1").fetchall())
        assert prios == {"NORMAL": 20, "LOW": 20, "HIGH": 20}
        leftovers = conn.execute("SELECT count(*) FROM replay_run").fetchone()[0]
        assert leftovers == 0
        # the run history outlives the checkpoint: one finished row per run, with its counts
        from casestream.operations import read_replay_runs

        runs = {r.projection: r for r in read_replay_runs(conn)}
        assert set(runs) == {dash.name, stats.name}
        for r, result in ((runs[dash.name], r1), (runs[stats.name], r2)):
            assert (r.state, r.mode, r.error) == ("finished", "rebuild", None)
            assert (r.events_read, r.events_applied, r.events_remaining) == (result.read, result.applied, 0)
            assert r.fraction == 1.0 and r.finished_at is not None and r.finished_at >= r.started_at
        assert runs[stats.name].events_read == len(decisions)
        assert conn.execute("SELECT to_regclass('case_dashboard_shadow')").fetchone()[0] is None


def test_audit_timeline_rebuild_equals_live(world: World) -> None:
    from casestream.migrations import apply_migrations
    from services.audit.adapters import handlers as audit_handlers
    from services.audit.bootstrap import migrations

    apply_migrations(world.dsn, migrations())
    cases, decisions = history(24)
    world.produce(cases, decisions)
    spec = private_spec(load_projection("audit.timeline"),
                        [world.case_topic, world.decision_topic], world.dsn, f"audit-{world.sfx}")
    rt = world.start_live(spec, registry=audit_handlers.build_registry(event_types=EVENT_TYPES))
    wait_until(lambda: _caught_up(rt, len(cases) + len(decisions)))
    world.stop_all()
    live = table_rows(world.dsn, "case_timeline", "event_id")
    journal_before = table_rows(world.dsn, "audit_journal", "event_id", exclude=("recorded_at",))
    assert len(live) == len(cases) + len(decisions)
    result = world.replayer(spec).run(ReplayOptions(batch_size=16))
    assert result.swapped
    assert table_rows(world.dsn, "case_timeline", "event_id") == live
    # the append-only journal is not touched by a replay
    assert table_rows(world.dsn, "audit_journal", "event_id",
                      exclude=("recorded_at",)) == journal_before
    # upcaster v2 -> v3 collapsed whitespace of v1/v2 descriptions in the timeline summaries
    with psycopg.connect(world.dsn) as conn:
        versions = {r[0] for r in conn.execute(
            "SELECT event_version FROM case_timeline WHERE event_type = 'CaseOpened'")}
        assert versions == {3}


def test_events_produced_during_rebuild_are_applied_exactly_once_after_handover(
        world: World) -> None:
    cases, decisions = history(150)
    world.produce(cases, decisions)
    stats = world.spec("decision.statistics")
    dash = world.spec("case.dashboard")
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        stats.create_tables(conn, stats.live_names())
        dash.create_tables(conn, dash.live_names())
    rs, rd = world.start_live(stats), world.start_live(dash)
    wait_until(lambda: _caught_up(rs, len(decisions)) and _caught_up(rd, len(cases)))

    journeys = [journey(i) for i in range(150, 250)]
    more_cases = [e for c, _ in journeys for e in c]
    more_decisions = [e for _, d in journeys for e in d]
    produced = threading.Event()

    def feed() -> None:
        # 100 more journeys, five at a time, while both rebuilds run
        for i in range(0, 100, 5):
            chunk = journeys[i:i + 5]
            world.produce([e for c, _ in chunk for e in c], [e for _, d in chunk for e in d])
            time.sleep(0.05)
        produced.set()

    feeder = threading.Thread(target=feed)
    feeder.start()
    slow = _slowed(stats, 0.01)
    r_stats = world.replayer(slow).run(ReplayOptions(batch_size=5))
    r_dash = world.replayer(_slowed(dash, 0.01)).run(ReplayOptions(batch_size=20))
    feeder.join(60)
    assert produced.is_set() and r_stats.swapped and r_dash.swapped
    print(f"stats replay read {r_stats.read} of {len(decisions)}+{len(more_decisions)}, "
          f"dashboard replay read {r_dash.read} of {len(cases)}+{len(more_cases)}")
    # the rebuilds overlapped the trickle: they read events produced after they started
    assert r_stats.read > len(decisions) or r_dash.read > len(cases)
    all_cases, all_decisions = cases + more_cases, decisions + more_decisions
    wait_until(lambda: _count(world.dsn, "decision_statistics") == len(all_decisions)
               and _count(world.dsn, "case_dashboard") == 250, timeout_s=60)
    wait_until(lambda: _caught_up(rs, len(all_decisions)) and _caught_up(rd, len(all_cases)),
               timeout_s=60)
    time.sleep(0.5)
    world.stop_all()
    with psycopg.connect(world.dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT event_id::text FROM decision_statistics")]
        assert sorted(ids) == sorted(d.event_id for d in all_decisions)  # none lost, none twice
        penalty = conn.execute("SELECT sum(penalty_cents) FROM decision_statistics").fetchone()[0]
        assert penalty == sum(d.payload.get("penalty_cents", 0) for d in all_decisions
                              if d.event_type == "ViolationDetermined")
        final = {c.aggregate_id: c for c in all_cases}  # last event per case (produced in order)
        rows = conn.execute("SELECT case_id, last_version, last_event_type FROM case_dashboard"
                            ).fetchall()
        assert {r[0]: (r[1], r[2]) for r in rows} == {
            k: (v.aggregate_version, v.event_type) for k, v in final.items()}


def _slowed(spec: Any, seconds: float) -> Any:
    base = spec.registry

    def registry(names: Any, types: Any) -> Any:
        reg = base(names, types)

        def pause(ctx: Any, events: Any) -> None:
            time.sleep(seconds)

        for t in sorted(reg.event_types):
            reg.add_batch(t, pause, kind=HandlerKind.PROJECTION)
        return reg

    return dataclasses.replace(spec, registry=registry)


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_mid_replay_leaves_live_untouched_and_rerun_resumes(
        world: World, registry_url: str, workers: int) -> None:
    cases, decisions = history(120)
    world.produce(cases, decisions)
    dash = world.run_live_until("case.dashboard", len(cases))
    live = table_rows(world.dsn, "case_dashboard", "case_id")
    args = [sys.executable, str(SUPPORT), "--projection", "case.dashboard", "--dsn", world.dsn,
            "--bootstrap", world.bootstrap, "--topic", world.case_topic,
            "--consumer", dash.live_consumer, "--batch-size", "10", "--slow-ms", "50",
            "--workers", str(workers)]
    if getattr(world.codec, "registry_kind", None) == "registry":
        args += ["--registry-url", registry_url]
    child = subprocess.Popen(args, cwd=Path(__file__).parents[2], env=os.environ.copy())
    try:
        wait_until(lambda: _applied_so_far(world.dsn, "case.dashboard") >= 100, timeout_s=60)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert table_rows(world.dsn, "case_dashboard", "case_id") == live  # live untouched
    time.sleep(1.0)
    checkpointed = _applied_so_far(world.dsn, "case.dashboard")
    time.sleep(1.5)
    assert _applied_so_far(world.dsn, "case.dashboard") == checkpointed  # no orphan writes on
    assert 0 < checkpointed < len(cases)
    # the shadow holds exactly what the checkpoint says was applied (same transaction)
    with psycopg.connect(world.dsn) as conn:
        shadow_versions = conn.execute(
            "SELECT coalesce(sum(last_version), 0) FROM case_dashboard_shadow").fetchone()[0]
        guard_versions = sum(checkpoint.load_guard(conn, "case.dashboard").values())
    assert shadow_versions == guard_versions
    result = world.replayer(dash).run(ReplayOptions(batch_size=50))
    assert result.resumed and result.swapped and result.read < len(cases)
    assert table_rows(world.dsn, "case_dashboard", "case_id") == live
    # and a rerun that starts over is clean too
    again = world.replayer(dash).run(ReplayOptions(batch_size=50, restart=True))
    assert not again.resumed and again.read == len(cases)
    assert table_rows(world.dsn, "case_dashboard", "case_id") == live


def _applied_so_far(dsn: str, projection: str) -> int:
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('replay_run')").fetchone()[0] is None:
            return 0
        row = conn.execute("SELECT events_applied FROM replay_run WHERE projection = %s",
                           (projection,)).fetchone()
        return row[0] if row else 0


def test_rebuild_sends_no_mail_and_produces_no_kafka_message(
        world: World, smtp_address: tuple[str, int], smtp_maildir: Path) -> None:
    """Side-effect (SMTP) and process (outbox) handlers are registered next to the projection;
    REPLAY runs neither, and a poison message in history is skipped, not dead-lettered."""
    import smtplib

    cases, decisions = history(20)
    world.produce(cases, decisions)
    produce(world.bootstrap, world.case_topic, [(b"poison", b"\x07not avro", [])])
    marker = f"replay-{world.sfx}@example.org"
    calls = {"smtp": 0, "process": 0}
    base = world.spec("case.dashboard")

    def registry(names: Any, types: Any) -> Any:
        reg = base.registry(names, types)

        def mail(ctx: Any, event: Any) -> None:
            calls["smtp"] += 1
            with smtplib.SMTP(*smtp_address) as s:
                s.sendmail("casestream@example.org", [marker], f"Subject: {marker}\n\nhi")

        def process(ctx: Any, event: Any) -> None:
            calls["process"] += 1
            ctx.outbox.append(ctx.conn, [event])

        reg.add("CaseClosed", mail, kind=HandlerKind.SIDE_EFFECT)
        reg.add("CaseSubmitted", process, kind=HandlerKind.PROCESS)
        return reg

    spec = dataclasses.replace(base, registry=registry)
    dlq = f"replay:{spec.name}.dlq"
    topics = [world.case_topic, world.decision_topic]
    before = _high_watermarks(world.bootstrap, topics)
    result = world.replayer(spec).run(ReplayOptions(batch_size=8))
    assert result.swapped and result.poison == 1 and result.applied == len(cases)
    assert calls == {"smtp": 0, "process": 0} and result.discarded_outbox == 0
    assert _high_watermarks(world.bootstrap, topics) == before
    assert not _topic_exists(world.bootstrap, dlq)
    assert not _topic_exists(world.bootstrap, f"{spec.live_consumer}.dlq")
    time.sleep(0.5)
    assert not [p for p in smtp_maildir.iterdir() if marker in p.read_text(errors="replace")]


def _high_watermarks(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "replay-test-probe"})
    try:
        md = c.list_topics(timeout=10)
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t in topics for p in md.topics[t].partitions}
    finally:
        c.close()


def _topic_exists(bootstrap: str, topic: str) -> bool:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "replay-test-probe"})
    try:
        return topic in c.list_topics(timeout=10).topics
    finally:
        c.close()


def test_changed_handler_with_new_column_is_filled_for_all_history(world: World) -> None:
    from psycopg import sql

    from services.decision.adapters import statistics

    cases, decisions = history(40)
    world.produce(cases, decisions)
    stats = world.run_live_until("decision.statistics", len(decisions))

    # version 2 of the projection: a new column penalty_band computed by the handler
    def create_tables(conn: Any, names: Any) -> None:
        statistics.create_tables(conn, names)
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS penalty_band text").format(
            sql.Identifier(names["decision_statistics"])))

    def registry(names: Any, types: Any) -> Any:
        reg = statistics.registry(names, types)
        table = sql.Identifier(names["decision_statistics"])

        def band(ctx: Any, events: Any) -> None:
            ctx.conn.execute(sql.SQL(
                "UPDATE {} SET penalty_band = CASE WHEN penalty_cents >= 3000 THEN 'high'"
                " WHEN penalty_cents > 0 THEN 'low' ELSE 'none' END"
                " WHERE event_id = ANY(%s::uuid[])").format(table), ([e.event_id for e in events],))

        for t in statistics.OUTCOME_OF:
            reg.add_batch(t, band, kind=HandlerKind.PROJECTION)
        return reg

    v2 = dataclasses.replace(stats, create_tables=create_tables, registry=registry)
    assert world.replayer(v2).run(ReplayOptions(batch_size=9)).swapped
    with psycopg.connect(world.dsn) as conn:
        bands = dict(conn.execute("SELECT penalty_band, count(*) FROM decision_statistics"
                                  " GROUP BY 1").fetchall())
    assert None not in bands and sum(bands.values()) == len(decisions)
    assert bands["high"] == sum(1 for d in decisions if d.payload.get("penalty_cents", 0) >= 3000)


def test_dry_run_reports_ranges_and_writes_nothing(world: World) -> None:
    cases, decisions = history(10)
    world.produce(cases, decisions)
    dash = world.spec("case.dashboard")
    plan = world.replayer(dash).plan(ReplayOptions())
    assert plan.count == len(cases) and not plan.resume
    assert [(p.topic, p.partition) for p in plan.partitions] == [
        (world.case_topic, 0), (world.case_topic, 1), (world.case_topic, 2)]
    assert any(world.case_topic in line for line in plan.lines())
    with psycopg.connect(world.dsn) as conn:
        assert conn.execute("SELECT to_regclass('replay_run')").fetchone()[0] is None
        assert conn.execute("SELECT to_regclass('case_dashboard_shadow')").fetchone()[0] is None


def test_to_time_builds_shadow_without_swapping(world: World) -> None:
    cases, decisions = history(10)
    world.produce(cases, decisions)
    time.sleep(1.2)
    cut = time.time()
    time.sleep(1.2)
    later_cases, later_decisions = history(5, first=10)
    world.produce(later_cases, later_decisions)
    stats = world.spec("decision.statistics")
    from datetime import UTC, datetime

    until = datetime.fromtimestamp(cut, tz=UTC).isoformat()
    result = world.replayer(stats).run(ReplayOptions(end=parse_to(until)))
    assert not result.swapped and result.read == len(decisions)
    assert _count(world.dsn, "decision_statistics_shadow") == len(decisions)
    assert _count(world.dsn, "decision_statistics") == 0  # live (empty) untouched


def test_a_second_replay_of_the_same_projection_is_refused_while_one_runs(world: World) -> None:
    from casestream.replay import ReplayError
    from casestream.replay.lease import ReplayLease

    dash = world.spec("case.dashboard")
    holder = ReplayLease(world.dsn, "case.dashboard")
    holder.acquire()
    try:
        with pytest.raises(ReplayError, match="another replay"):
            world.replayer(dash).run(ReplayOptions())
    finally:
        holder.release()
    with psycopg.connect(world.dsn, autocommit=True) as conn:  # released: the row is gone
        assert conn.execute("SELECT count(*) FROM replay_lease").fetchone()[0] == 0


def test_a_replay_that_cannot_swap_leaves_a_failed_run_record(world: World) -> None:
    from casestream.operations import read_replay_runs
    from casestream.replay import ReplayError

    cases, decisions = history(4)
    world.produce(cases, decisions)
    dash = world.spec("case.dashboard")
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        dash.create_tables(conn, dash.live_names())
    with psycopg.connect(world.dsn) as reader:
        # an open reader's ACCESS SHARE lock blocks the swap's ACCESS EXCLUSIVE lock
        reader.execute("SELECT count(*) FROM case_dashboard").fetchone()
        with pytest.raises(ReplayError, match="stayed locked"):
            world.replayer(dash).run(ReplayOptions(swap_attempts=1, lock_timeout_s=0.2))
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        (run,) = read_replay_runs(conn)
    assert (run.projection, run.state) == (dash.name, "failed")
    assert "stayed locked" in (run.error or "") and run.finished_at is not None
    assert run.events_read == len(cases) and run.eta_s(run.updated_at) is None


def test_a_running_replay_records_its_progress_with_its_batches(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.operations import read_replay_runs
    from casestream.replay import history as run_history

    cases, decisions = history(6)
    world.produce(cases, decisions)
    stats = world.spec("decision.statistics")
    monkeypatch.setattr(run_history, "UPDATE_INTERVAL_S", 0.0)  # every batch
    monkeypatch.setattr(run_history, "end", lambda *a, **k: None)  # the row stays as last updated
    world.replayer(stats).run(ReplayOptions(batch_size=2))
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        (run,) = read_replay_runs(conn)
    assert run.state == "running" and run.finished_at is None
    assert run.events_read == len(decisions) and run.events_applied == len(decisions)
    # remaining is the reader's lag, which may lag one batch behind its read counter
    assert 0 <= run.events_remaining <= 2 and run.updated_at > run.started_at
