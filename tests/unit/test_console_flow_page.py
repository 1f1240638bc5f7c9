"""The console's Flow page puts what is behind or failing first (outbox pending past the
threshold or failed, a service down, a group with lag, a running or
failed replay) and folds everything else in ``<details>``. Services answer from an in-memory
HTTP transport; the group lag read is replaced."""

from __future__ import annotations

import re
import types
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import casestream.console.app as app_module
from casestream.auth import ROLE_OFFICER, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.operations import PartitionLag, ReplayRun, ReplayRuns

METRICS = {
    "http://behind.test": "outbox_pending_total 40\noutbox_oldest_pending_age_seconds 31.5\noutbox_failed_total 0\n"
                          'relay_shards_held{shard="0"} 1\n',
    "http://calm.test": "outbox_pending_total 0\noutbox_failed_total 0\nrelay_shards_held 2\n",
    "http://erring.test": "outbox_pending_total 1\noutbox_oldest_pending_age_seconds 0.2\noutbox_failed_total 0\n"
                          "relay_delivery_errors_total 3\n",
}
LAG = {"stuck.group": [PartitionLag("stuck.group", "cases", 0, None, 2, 2),
                       PartitionLag("stuck.group", "cases", 1, 5, 5, 0)],
       "calm.group": [PartitionLag("calm.group", "cases", 0, 7, 7, 0)]}


def answer(request: httpx.Request) -> httpx.Response:
    base = f"{request.url.scheme}://{request.url.host}"
    if base in METRICS:
        return httpx.Response(200, text=METRICS[base])
    raise httpx.ConnectError("refused", request=request)


def make(monkeypatch: pytest.MonkeyPatch, services: dict[str, str], consumers: list[str],
         runs: ReplayRuns | None = None) -> str:
    monkeypatch.setattr(app_module, "httpx", types.SimpleNamespace(
        Client=lambda **kw: httpx.Client(transport=httpx.MockTransport(answer), **kw), HTTPError=httpx.HTTPError))
    monkeypatch.setattr(app_module, "group_lag", lambda _k, group, _topics, **_kw: LAG[group])
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"}, codec=None,
                             services=services, consumers=consumers, journey_topics=["cases"],
                             replay_runs=(lambda: runs) if runs is not None else None)
    client = TestClient(console_app(sources, TokenVerifier(AuthSettings())))
    token = dev_token("tenant-a", (ROLE_OFFICER,), subject="alice")
    return client.get("/flow?fragment=1", headers={"Authorization": f"Bearer {token}"}).text


def tbody(html: str, ident: str) -> str:
    found = re.search(rf'<table id="{ident}">(.*?)</table>', html, re.S)
    assert found, f"no table {ident}"
    return found.group(1)


def test_what_is_behind_comes_first_and_the_rest_is_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    html = make(monkeypatch, {"behind": "http://behind.test", "calm": "http://calm.test",
                              "erring": "http://erring.test", "gone": "http://gone.test"},
                ["stuck.group", "calm.group"])
    first, folded = html.split('<details id="folded">')
    hot = tbody(first, "outbox-behind")
    assert "behind" in hot and "31.5" in hot and "gone" in hot and "down" in hot
    assert "calm" not in hot and "erring" not in hot  # delivery errors since start: shown, not behind
    caught_up = tbody(folded, "outbox")
    assert "2 shard(s) held" in caught_up and "3 delivery error(s)" in caught_up
    lag = tbody(first, "lag-behind")
    assert "stuck.group" in lag and "1 partition(s) never committed" in lag and "calm.group" not in lag
    assert tbody(first, "lag").count("<tr>") == 2  # the header and the one partition behind
    assert "(total 2)" in first and "calm.group" in tbody(folded, "lag-caught-up")
    assert "2 service(s) caught up, 1 group(s) at lag 0 (2 partitions)" in folded


def test_nothing_behind_says_so_and_folds_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    html = make(monkeypatch, {"calm": "http://calm.test"}, ["calm.group"])
    first = html.split('<details id="folded">')[0]
    assert 'id="all-clear"' in first and "outbox-behind" not in first and 'id="no-lag"' in first


def test_running_and_failed_replays_come_first_finished_ones_are_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(timezone.utc)

    def run(run_id: str, state: str) -> ReplayRun:
        return ReplayRun(run_id=run_id, projection=f"p.{run_id}", mode="rebuild", state=state,
                         started_at=now - timedelta(seconds=10), updated_at=now,
                         finished_at=None if state == "running" else now, events_read=100,
                         events_remaining=100 if state == "running" else 0, events_applied=100, error=None)

    html = make(monkeypatch, {"calm": "http://calm.test"}, ["calm.group"],
                ReplayRuns([run("a", "running"), run("b", "finished")]))
    first, folded = html.split('<details id="folded">')
    assert "p.a" in tbody(first, "replays") and "p.b" not in first and "p.b" in tbody(folded, "replays-done")
