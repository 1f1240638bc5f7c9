"""Replay after 200 cases ran through the whole suite, marked ``e2e``.

The five services run as processes (``casestream.service.devstack.ServiceStack``) on non-default ports
with private databases (``CASESTREAM_<SVC>_PORT`` / ``_DATABASE``), on the suite's real topics.
The case dashboard and decision statistics live consumers run in this process with private
group ids. Then each
projection is rebuilt — the audit timeline while the audit service keeps consuming — and must
equal its live table row for row; no mail about these cases is sent during the rebuilds.

The audit service's group ``audit.journal`` is shared with any other stack on the same topics,
so its live timeline holds only events since that group's committed offsets; the comparison is
over this test's cases (the rebuild from ``earliest`` also holds older history).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events.catalog import load_catalog
from casestream.testing.consumer import close_codec, real_codec, run_in_thread, wait_until
from services.demo import case_mix, open_and_submit, wait_final
from casestream.service.devstack import ServiceStack
from casestream.replay import ReplayOptions, Replayer, load_projection
from tests.integration.test_replay_support import live_runtime, private_spec, table_rows
from services import schemas_dir

pytestmark = pytest.mark.e2e

SERVICES = ("case", "audit", "saga", "decision", "notification")
PORTS = {"case": 28101, "audit": 28102, "saga": 28103, "decision": 28104, "notification": 28105}


@pytest.fixture
def suite(tmp_path: Path, kafka_bootstrap: str, registry_url: str, pg_url: str,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import os

    sfx = uuid.uuid4().hex[:8]
    dbs = {s: f"replay_e2e_{s}_{sfx}" for s in SERVICES}
    admin = pg_url.rstrip("/") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        for db in dbs.values():
            conn.execute(f'CREATE DATABASE "{db}"')
    env = dict(os.environ, CASESTREAM_KAFKA_BOOTSTRAP=kafka_bootstrap,
               CASESTREAM_REGISTRY_URL=registry_url, CASESTREAM_PG_URL=pg_url)
    for s in SERVICES:
        env[f"CASESTREAM_{s.upper()}_PORT"] = str(PORTS[s])
        env[f"CASESTREAM_{s.upper()}_DATABASE"] = dbs[s]
        monkeypatch.setenv(f"CASESTREAM_{s.upper()}_PORT", str(PORTS[s]))  # demo helpers' URLs
    stack = ServiceStack(env=env, log_dir=tmp_path / "logs")
    try:
        stack.start_all(list(SERVICES))
        yield {"stack": stack, "dsn": {s: f"{pg_url.rstrip('/')}/{dbs[s]}" for s in SERVICES},
               "sfx": sfx, "bootstrap": kafka_bootstrap, "registry_url": registry_url}
    finally:
        stack.stop_all()
        with psycopg.connect(admin, autocommit=True) as conn:
            for db in dbs.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _mails_about(maildir: Path, ids: set[str]) -> int:
    return sum(1 for p in maildir.glob("*.eml") if any(i in p.read_text(errors="replace")
                                                       for i in ids))


def test_each_rebuilt_projection_equals_live_after_200_cases(
        suite: dict[str, Any], smtp_maildir: Path) -> None:
    bootstrap, dsn, sfx = suite["bootstrap"], suite["dsn"], suite["sfx"]
    codec = real_codec(suite["registry_url"], fallback=False)
    event_types = load_catalog(schemas_dir()).event_types
    dash = private_spec(load_projection("case.dashboard"), ["outbox.event.case"], dsn["case"],
                        f"case.dashboard.e2e-{sfx}")
    stats = private_spec(load_projection("decision.statistics"), ["outbox.event.decision"],
                         dsn["decision"], f"decision.statistics.e2e-{sfx}")
    audit = private_spec(load_projection("audit.timeline"), list(load_projection(
        "audit.timeline").topics), dsn["audit"], "audit.journal")
    pools, threads = [], []
    try:
        for spec in (dash, stats):
            with psycopg.connect(spec.dsn(), autocommit=True) as conn:
                spec.create_tables(conn, spec.live_names())
            pool = ConnectionPool(spec.dsn(), min_size=1, max_size=2, open=True)
            pools.append(pool)
            rt = live_runtime(spec, codec, pool, bootstrap, batch_size=200)
            thread, stop = run_in_thread(rt)
            threads.append((rt, thread, stop))
            assert rt.ready.wait(60)

        with httpx.Client(timeout=20.0) as client:
            runs = [open_and_submit(client, spec) for spec in case_mix(200)]
            wait_final(client, runs, timeout_s=420)
        ids = {r.case_id for r in runs}
        assert all(r.status in ("closed", "returned") for r in runs), \
            [(r.case_id, r.status) for r in runs if r.status not in ("closed", "returned")]

        def mine_in(table: str, column: str, db: str) -> int:
            with psycopg.connect(db) as conn:
                return conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ANY(%s)",
                                    (list(ids),)).fetchone()[0]

        wait_until(lambda: _final_rows(dsn["case"], ids) == 200, timeout_s=120)
        decided = 200  # one decision per case
        wait_until(lambda: mine_in("decision_statistics", "case_id", dsn["decision"]) == decided,
                   timeout_s=120)
        for _rt, _thread, stop in threads:  # live snapshot of the two in-process projections
            stop.set()
        for _rt, thread, _stop in threads:
            thread.join(60)
        live_dash = table_rows(dsn["case"], "case_dashboard", "case_id")
        live_stats = table_rows(dsn["decision"], "decision_statistics", "event_id")
        live_audit = _timeline_of(dsn["audit"], ids)
        assert len({r[2] for r in live_audit}) == 200  # every case has a live timeline
        mails = _mails_about(smtp_maildir, ids)

        for spec, expect in ((dash, live_dash), (stats, live_stats)):
            result = Replayer(spec, codec=codec, dsn=spec.dsn(), bootstrap=bootstrap,
                              event_types=event_types).run(ReplayOptions(batch_size=500))
            assert result.swapped
            table, order = spec.tables[0], ("case_id" if spec is dash else "event_id")
            assert table_rows(spec.dsn(), table, order) == expect
        # the audit timeline is rebuilt while the audit service keeps consuming
        result = Replayer(audit, codec=codec, dsn=dsn["audit"], bootstrap=bootstrap,
                          event_types=event_types).run(ReplayOptions(batch_size=500))
        assert result.swapped and result.poison >= 0
        assert _timeline_of(dsn["audit"], ids) == live_audit
        assert _mails_about(smtp_maildir, ids) == mails  # no notice re-sent by a rebuild
    finally:
        for _rt, thread, stop in threads:
            stop.set()
            thread.join(60)
        for pool in pools:
            pool.close()
        close_codec(codec)


def _final_rows(dsn: str, ids: set[str]) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM case_dashboard WHERE case_id = ANY(%s)"
                            " AND status IN ('closed', 'returned')", (list(ids),)).fetchone()[0]


def _timeline_of(dsn: str, ids: set[str]) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT event_id, tenant_id, case_id, event_type, event_version, aggregate_type,"
            " aggregate_version, occurred_at, published_at, source, summary FROM case_timeline"
            " WHERE case_id = ANY(%s) ORDER BY event_id", (list(ids),)).fetchall()
