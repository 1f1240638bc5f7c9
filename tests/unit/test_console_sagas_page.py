"""The console's Sagas page answers: the counts by definition and state (not raw gauge
names), the waiting sagas nearest deadline first with the time left, stuck, manual review
and compensation failed, each linked to its journey. The saga service is an in-memory
HTTP transport answering the saga routes."""

from __future__ import annotations

import re
import types
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import casestream.console.app as app_module
from casestream.auth import ROLE_SUPERVISOR, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app

def saga(sid: str, state: str, kind: str, *, case: str, due_s: float | None = None,
         definition: str = "case-review") -> dict[str, Any]:
    due = None if due_s is None else datetime.now(timezone.utc) + timedelta(seconds=due_s)
    at = None if due is None else due.isoformat().replace("+00:00", "Z")
    return {"saga_id": sid, "definition": definition, "case_id": case, "state": state, "state_kind": kind,
            "step": "decide" if at else None, "deadline": {"at": at} if at else None}


def sagas() -> list[dict[str, Any]]:
    """The saga service's answer, deadlines relative to the moment it is asked (collection may
    run long before the test)."""
    return [saga("s-late", "AWAITING_DECISION", "active", case="c1", due_s=7230),
            saga("s-soon", "AWAITING_DECISION", "active", case="c2", due_s=125),
            saga("s-over", "AWAITING_NOTICE", "active", case="c3", due_s=-90),
            saga("s-review", "MANUAL_REVIEW", "parked", case="c4"),
            saga("s-failed", "COMPENSATION_FAILED", "terminal", case="c5"),
            saga("s-done", "COMPLETED", "terminal", case="c6"),
            saga("s-other", "WAITING", "active", case="c7", due_s=600, definition="watch-expiry")]


def answer(request: httpx.Request) -> httpx.Response:
    path, q = request.url.path, request.url.params
    if path == "/sagas/metrics":
        return httpx.Response(200, json={"counters": {}, "gauges": {
            "sagas_stuck": 1, "sagas_alerting": 1, "sagas_parked": 1, "sagas{state=COMPLETED}": 1}})
    if path == "/sagas/stuck":
        return httpx.Response(200, json={"items": [sagas()[2]]})
    if path == "/sagas":
        state = q.get("state")
        return httpx.Response(200, json={"items": [s for s in sagas() if state is None or s["state"] == state]})
    return httpx.Response(404)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> TestClient:
    fake = types.SimpleNamespace(
        Client=lambda **kw: httpx.Client(transport=httpx.MockTransport(answer), **kw),
        HTTPError=httpx.HTTPError)
    monkeypatch.setattr(app_module, "httpx", fake)
    sources = ConsoleSources(settings=ConsoleSettings(sagas_url="http://sagas.test"),
                             kafka={"bootstrap.servers": "127.0.0.1:1"}, codec=None, services={},
                             consumers=[], journey_topics=[], sagas_url="http://sagas.test", _sagas_probed=True)
    return TestClient(console_app(sources, TokenVerifier(AuthSettings())), follow_redirects=False)


def section(html: str, ident: str) -> str:
    found = re.search(rf'<table id="{ident}">(.*?)</table>', html, re.S)
    assert found, ident
    return found.group(1)


def test_the_sagas_page_counts_by_definition_and_state_without_gauge_names(client: TestClient) -> None:
    html = client.get("/sagas", headers={"Authorization": f"Bearer {dev_token('t', (ROLE_SUPERVISOR,))}"}).text
    assert "sagas{state=" not in html and "sagas_stuck" not in html
    counts = section(html, "counts")
    assert re.search(r"case-review</td><td>AWAITING_DECISION</td><td>active</td><td><span class=\"num\">2<", counts)
    assert "watch-expiry" in counts
    summary = re.search(r'<p id="saga-summary">(.*?)</p>', html, re.S)
    assert summary and "stuck <b>1</b>" in summary.group(1) and "manual review <b>1</b>" in summary.group(1)


def test_waiting_sagas_are_listed_before_their_deadline_nearest_first(client: TestClient) -> None:
    html = client.get("/sagas", headers={"Authorization": f"Bearer {dev_token('t', (ROLE_SUPERVISOR,))}"}).text
    waiting = section(html, "waiting")
    order = [sid for sid in re.findall(r"<code>([^<]+)</code>", waiting)]
    assert order == ["s-over", "s-soon", "s-other", "s-late"], order
    assert re.search(r"in 2m 0[0-5]s", waiting) and "overdue 1m" in waiting and re.search(r"in 2h 0[01]m", waiting)
    assert 'href="/journeys?case_id=c2"' in waiting


def test_stuck_review_and_failed_sagas_link_to_their_journey(client: TestClient) -> None:
    html = client.get("/sagas", headers={"Authorization": f"Bearer {dev_token('t', (ROLE_SUPERVISOR,))}"}).text
    assert 'href="/journeys?case_id=c3"' in section(html, "stuck")
    review = section(html, "manual-review")
    assert 'href="/journeys?case_id=c4"' in review and 'action="/sagas/s-review/resolve"' in review
    assert 'href="/journeys?case_id=c5"' in section(html, "compensation-failed")
