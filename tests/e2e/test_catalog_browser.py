"""The console's event catalog pages in headless Chromium, served by a real ``casestream
console`` process over the running infrastructure: the team's watch service beside the suite,
from the installed entry points only. Screenshots: ``.local/test-output/catalog/``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from casestream.auth import ROLE_OFFICER, dev_token
from casestream.service.devstack import console_process
from casestream.testing.relay import free_port
from tests.support.asyncapi import asyncapi_errors
from tests.support.browser import headless_chromium

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".local" / "test-output" / "catalog"
OFFICER = dev_token("tenant-a", (ROLE_OFFICER,), subject="officer-bob")


@pytest.fixture(scope="module")
def console(infra_env: dict[str, str]) -> Iterator[str]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    env = dict(infra_env, CASESTREAM_CONSOLE_PORT=str(free_port()))
    with console_process(env=env, log_dir=SHOTS / "logs") as base:
        yield base


@pytest.fixture(scope="module")
def browser(console: str) -> Iterator[object]:
    with headless_chromium(implicit_wait_s=2) as driver:
        driver.get(f"{console}/login?next=/catalog")
        driver.find_element("id", "token").send_keys(OFFICER)
        driver.find_element("id", "login").click()
        yield driver


def test_the_catalog_pages_show_the_team_service_beside_the_suite(browser, console: str) -> None:  # noqa: ANN001
    browser.get(f"{console}/catalog")
    channels = browser.find_element("id", "channels").text
    for topic in ("outbox.event.case", "outbox.event.decision", "outbox.event.notice", "outbox.event.saga",
                  "outbox.event.watch"):
        assert topic in channels, channels
    watch_row = next(r for r in browser.find_elements("css selector", "#channels tbody tr")
                     if "outbox.event.watch" in r.text)
    assert "watch" in watch_row.find_elements("css selector", "td")[1].text
    services = browser.find_element("id", "services").text
    assert "watch.triggers: outbox.event.case" in services and "audit.journal:" in services
    browser.save_screenshot(str(SHOTS / "catalog.png"))

    watch_row.find_element("link text", "WatchTriggered").click()
    assert browser.current_url.endswith("/catalog/events/WatchTriggered")
    schemas = browser.find_elements("css selector", "pre.schema")
    assert len(schemas) == 2 and '"final"' in schemas[0].text and '"final"' not in schemas[1].text
    assert "v1 → v2 (payload)" in browser.find_element("id", "v1").find_element("xpath", "following-sibling::p[2]").text
    browser.save_screenshot(str(SHOTS / "event-watch-triggered.png"))

    doc = httpx.get(f"{console}/catalog/asyncapi.json", headers={"Authorization": f"Bearer {OFFICER}"},
                    timeout=10).json()
    assert asyncapi_errors(doc) == []
    assert "watch.triggers.receive.outbox.event.case" in doc["operations"]
