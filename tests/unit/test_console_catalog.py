"""The console's event catalog pages (in process, no Kafka): rendered from the installed
entry points, the team's watch service beside the suite; sign-in required; text escaped."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import casestream.console.catalog as catalog_module
from casestream.auth import ROLE_OFFICER, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.errors import ConfigError
from casestream.service import installed_asyncapi

BEARER = {"Authorization": f"Bearer {dev_token('tenant-a', (ROLE_OFFICER,), subject='alice')}"}


def make_client() -> TestClient:
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=None, services={}, consumers=["watch.triggers"], journey_topics=[])
    return TestClient(console_app(sources, TokenVerifier(AuthSettings())), follow_redirects=False)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return make_client()


def _row(html: str, table_id: str, first_cell: str) -> str:
    body = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert body, html
    for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S):
        if first_cell in row.split("</td>", 1)[0]:
            return row
    raise AssertionError(f"no row {first_cell!r} in #{table_id}")


def test_the_catalog_needs_a_signed_in_reader(client: TestClient) -> None:
    for path in ("/catalog", "/catalog/events/CaseOpened", "/catalog/asyncapi.json"):
        r = client.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?"), path


def test_the_catalog_lists_channels_event_types_and_services_with_the_team_beside_the_suite(client: TestClient) -> None:
    r = client.get("/catalog", headers=BEARER)
    assert r.status_code == 200, r.text
    html = r.text
    assert 'href="/catalog" class="on">Catalog</a>' in html
    watch = _row(html, "channels", "outbox.event.watch")
    assert "<td>watch</td>" in watch and 'href="/catalog/events/WatchTriggered"' in watch
    case = _row(html, "channels", "outbox.event.case")
    assert "<td>case</td>" in case
    for group in ("watch.triggers", "watch.cases", "audit.journal", "saga.orchestrator"):
        assert group in case, group
    triggered = _row(html, "events", "WatchTriggered")
    assert "acme.watch.WatchTriggered" in triggered and "v1, v2" in triggered and "v1 → v2 (payload)" in triggered
    assert "v1, v2, v3" in _row(html, "events", "CaseOpened")
    assert "watch.triggers: outbox.event.case" in _row(html, "services", "watch")
    assert "outbox.event.saga" in _row(html, "services", "saga")


def test_an_event_page_shows_every_version_s_schema_producer_and_readers(client: TestClient) -> None:
    r = client.get("/catalog/events/WatchTriggered", headers=BEARER)
    assert r.status_code == 200, r.text
    html = r.text
    assert html.index('id="v2"') < html.index('id="v1"')  # newest first
    assert "Version 2 <span class=ok>newest</span>" in html
    assert html.count('<pre class="schema">') == 2 and "&quot;name&quot;: &quot;final&quot;" in html
    event = _row(html, "event", "acme.watch.WatchTriggered")
    assert "outbox.event.watch" in event and "<td>watch</td>" in event
    case = client.get("/catalog/events/CaseClosed", headers=BEARER).text
    assert "watch.triggers (watch)" in _row(case, "event", "casestream.case.CaseClosed")
    missing = client.get("/catalog/events/NoSuchEvent", headers=BEARER)
    assert missing.status_code == 404 and "NoSuchEvent is not in the installed catalog" in missing.text


def test_the_document_is_served_as_json(client: TestClient) -> None:
    r = client.get("/catalog/asyncapi.json", headers=BEARER)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == installed_asyncapi()


def test_catalog_text_is_escaped_and_a_broken_catalog_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = copy.deepcopy(installed_asyncapi())
    doc["components"]["messages"]["WatchTriggered.v2"]["summary"] = "<script>alert(1)</script>"
    monkeypatch.setattr(catalog_module, "_installed", lambda: doc)
    html = make_client().get("/catalog/events/WatchTriggered", headers=BEARER).text
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html

    def broken() -> dict[str, Any]:
        raise ConfigError("entry point casestream.schemas watch = watch:gone: AttributeError: gone")

    monkeypatch.setattr(catalog_module, "_installed", broken)
    r = make_client().get("/catalog", headers=BEARER)
    assert r.status_code == 500 and "Traceback" not in r.text
    assert '<p class=bad id=catalog-error>entry point casestream.schemas watch = watch:gone' in r.text
