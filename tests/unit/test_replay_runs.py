"""Replay runs read model (progress, rate, ETA arithmetic), the cache of its reads, and the Flow
page's replay table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from starlette.testclient import TestClient

from casestream.auth import ROLE_OFFICER, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.operations import ReplayRun, ReplayRuns, ReplayRunsCache

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def run(**kw: object) -> ReplayRun:
    fields: dict[str, object] = dict(run_id="r1", projection="billing.ledger", mode="rebuild",
                                     state="running", started_at=T0,
                                     updated_at=T0 + timedelta(seconds=10), events_read=1000,
                                     events_applied=990, events_remaining=3000)
    fields.update(kw)
    return ReplayRun(**fields)  # type: ignore[arg-type]


def test_progress_rate_and_eta_of_a_running_run() -> None:
    r = run()
    assert r.fraction == 0.25  # 1000 of 1000 + 3000
    assert r.rate == 100.0  # 1000 events in 10 s
    # 3000 left at 100/s = 30 s after updated_at; asked 5 s after updated_at
    assert r.eta_s(T0 + timedelta(seconds=15)) == 25.0
    assert r.eta_s(T0 + timedelta(seconds=90)) == 0.0  # overdue, never negative


def test_no_eta_without_a_rate_or_once_ended() -> None:
    assert run(updated_at=T0).rate is None and run(updated_at=T0).eta_s(T0) is None
    assert run(events_read=0).eta_s(T0) is None
    assert run(events_read=0, events_remaining=0).fraction is None
    done = run(state="finished", events_remaining=0, finished_at=T0 + timedelta(seconds=40))
    assert done.fraction == 1.0 and done.eta_s(T0) is None
    assert run(state="failed").eta_s(T0 + timedelta(seconds=15)) is None


class Reads:
    """A ``load`` answering the runs it is given and counting its calls; a fake clock."""

    def __init__(self, *answers: ReplayRuns) -> None:
        self.answers, self.calls, self.now = list(answers), 0, 100.0

    def __call__(self) -> ReplayRuns:
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]

    def clock(self) -> float:
        return self.now


def test_the_cache_reads_again_after_idle_s_when_no_run_is_running() -> None:
    reads = Reads(ReplayRuns([run(state="finished")]), ReplayRuns([run()]))
    cache = ReplayRunsCache(reads, idle_s=10.0, running_s=1.0, clock=reads.clock)
    assert cache().runs[0].state == "finished" and reads.calls == 1
    reads.now += 9.9  # a refresh every 2 s for almost 10 s: no new read
    assert cache().runs[0].state == "finished" and reads.calls == 1
    reads.now += 0.1
    assert cache().runs[0].state == "running" and reads.calls == 2  # a run started meanwhile


def test_the_cache_reads_again_after_running_s_while_a_run_runs_or_a_database_failed() -> None:
    for answer in (ReplayRuns([run()]), ReplayRuns([], ["db:5432/case: OperationalError"])):
        reads = Reads(answer)
        cache = ReplayRunsCache(reads, idle_s=10.0, running_s=1.0, clock=reads.clock)
        cache()
        reads.now += 0.5
        cache()
        assert reads.calls == 1
        reads.now += 0.5
        cache()
        assert reads.calls == 2
    with pytest.raises(ValueError, match="idle_s and running_s must be >= 0"):
        ReplayRunsCache(reads, idle_s=-1)


def test_console_sources_cache_the_replay_runs_for_replay_runs_idle_s() -> None:
    sources = ConsoleSources.discover(
        ConsoleSettings(replay_databases=["postgresql://postgres@127.0.0.1:1/x"], replay_runs_idle_s=30),
        kafka={}, codec=None, specs={})
    assert isinstance(sources.replay_runs, ReplayRunsCache) and sources.replay_runs._idle_s == 30


def test_flow_page_lists_runs_with_progress_and_eta_from_an_in_memory_source() -> None:
    now = datetime.now(timezone.utc)
    running = run(started_at=now - timedelta(seconds=10), updated_at=now)  # 100/s, 3000 left
    failed = run(run_id="r0", projection="case.dashboard", state="failed", started_at=now - timedelta(hours=1),
                 updated_at=now - timedelta(minutes=59), error="database <down>")
    view = ReplayRuns([running, failed], ["db.example:5432/case: OperationalError: refused"])
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=None, services={}, consumers=[], journey_topics=[],
                             replay_runs=lambda: view)
    client = TestClient(console_app(sources, TokenVerifier(AuthSettings())))
    token = dev_token("tenant-a", (ROLE_OFFICER,), subject="alice")
    html = client.get("/flow?fragment=1", headers={"Authorization": f"Bearer {token}"}).text
    table = html.split('id="replays"')[1].split("</table>")[0]
    assert table.count("<tr>") == 3  # header + two runs
    assert "billing.ledger" in table and "25.0%" in table and "(1000 of 4000)" in table
    assert "ETA" in table and ('class="eta">30s<' in table or 'class="eta">29s<' in table)
    assert "database &lt;down&gt;" in table and 'class="bad state">failed' in table
    assert "db.example:5432/case: OperationalError" in html


def test_flow_page_says_when_no_replay_database_is_known() -> None:
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=None, services={}, consumers=[], journey_topics=[])
    client = TestClient(console_app(sources, TokenVerifier(AuthSettings())))
    token = dev_token("tenant-a", (ROLE_OFFICER,), subject="alice")
    html = client.get("/flow?fragment=1", headers={"Authorization": f"Bearer {token}"}).text
    assert "CASESTREAM_CONSOLE_REPLAY_DATABASES" in html
