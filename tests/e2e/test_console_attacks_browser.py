"""Another web page attacks the operations console in a real browser (headless Chromium,
Debian's ``chromium`` and ``chromium-driver``, driven by Selenium), and fails.

``casestream console`` runs as a process on 18401 over the real broker, showing one consumer
of this test whose dead-letter topic holds one real dead letter; the saga service it calls
is a small recorder on 18402 (it lists one MANUAL_REVIEW saga and records each resolve).
The attacker's pages are served on 18403 and opened as ``http://127.0.0.1:18403`` (the same
*site* as the console: another port, so the SameSite=Strict cookie is sent) and as
``http://localhost:18403`` (another site). Each auto-submits a form to resolve the saga,
discard or re-drive the dead letter, or sign the victim in as the attacker; one frames
the console. A signed-in supervisor visits each. None has an effect, while the same
actions from the console's own pages do (the test would see them).

Screenshots go to ``.local/test-output/console-attacks/``.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from casestream.auth import ROLE_OPERATOR, ROLE_SUPERVISOR, dev_token
from casestream.consumer import DeadLetter
from casestream.consumer.deadletters import dead_letter_headers
from casestream.consumer.records import Record
from casestream.operations.deadletters import load_dead_letter_state
from casestream.service.devstack import console_process
from casestream.testing import create_topics, delete_topics
from tests.support.browser import headless_chromium
from tests.support.waiting import wait_for

CONSOLE_PORT, SAGAS_PORT, ATTACKER_PORT = 18401, 18402, 18403
CONSOLE = f"http://127.0.0.1:{CONSOLE_PORT}"
SAME_SITE = f"http://127.0.0.1:{ATTACKER_PORT}"
CROSS_SITE = f"http://localhost:{ATTACKER_PORT}"
SAGA_ID = "saga-under-review"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".local" / "test-output" / "console-attacks"
VICTIM = dev_token("tenant-a", (ROLE_SUPERVISOR, ROLE_OPERATOR), subject="victim-sup")
ATTACKER = dev_token("tenant-a", (ROLE_SUPERVISOR,), subject="mallory")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.3)
        return probe.connect_ex(("127.0.0.1", port)) != 0


class Served:
    """A starlette app under uvicorn in a thread of this process."""

    def __init__(self, app: Starlette, port: int) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        wait_for(lambda: self.server.started, 20, "a test server to start")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def saga_recorder(resolved: list[str]) -> Starlette:
    """The saga routes the console calls: one MANUAL_REVIEW saga; each resolve recorded."""
    def listing(request: Request) -> JSONResponse:
        items = ([{"saga_id": SAGA_ID, "state": "MANUAL_REVIEW", "case_id": "case-x"}]
                 if request.query_params.get("state") == "MANUAL_REVIEW" else [])
        return JSONResponse({"items": items})

    def resolve(request: Request) -> JSONResponse:
        resolved.append(request.path_params["saga_id"])
        return JSONResponse({"saga_id": request.path_params["saga_id"], "state": "COMPLETED"})

    return Starlette(routes=[
        Route("/sagas", listing), Route("/sagas/stuck", lambda _r: JSONResponse({"items": []})),
        Route("/sagas/metrics", lambda _r: JSONResponse({"gauges": {}})),
        Route("/sagas/{saga_id}/resolve", resolve, methods=["POST"])])


def attacker_pages(consumer: str, label: str) -> Starlette:
    """Pages that post to the console as soon as they load, and one that frames it."""
    def auto(action: str, fields: dict[str, str]) -> str:
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
        return (f'<!doctype html><title>win a prize</title><form method="post" action="{CONSOLE}{action}">'
                f"{inputs}</form><script>document.forms[0].submit()</script>")

    pages = {
        "resolve": auto(f"/sagas/{SAGA_ID}/resolve", {"reason": "csrf"}),
        "discard": auto(f"/deadletters/{consumer}", {"action": "discard", "label": label, "reason": "csrf"}),
        "redrive": auto(f"/deadletters/{consumer}", {"action": "redrive", "label": label, "reason": "csrf"}),
        "login": auto("/login", {"token": ATTACKER, "next": "/journeys"}),
        "frame": f'<!doctype html><title>framed</title><iframe id="victim" src="{CONSOLE}/deadletters" '
                 'width="1200" height="800"></iframe>',
    }
    return Starlette(routes=[Route(f"/{name}", lambda _r, html=html: HTMLResponse(html))
                             for name, html in pages.items()])


@pytest.fixture(scope="module")
def dead_letter(kafka_bootstrap: str) -> Iterator[tuple[str, str]]:
    """(consumer, label) of one open dead letter on a consumer's topic of this test."""
    consumer = f"test.attacks-{uuid.uuid4().hex[:8]}.worker"
    create_topics(kafka_bootstrap, [f"{consumer}.dlq", f"{consumer}.redrive"], partitions=1)
    now = datetime.now(timezone.utc)
    record = Record(topic="outbox.event.case", partition=0, offset=1, key=b"case-x", value=b"not avro",
                    headers=())
    dl = DeadLetter(record=record, error_class="builtins.RuntimeError", reason="retries_exhausted",
                    message="down", attempts=5, first_failure=now, last_failure=now)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(f"{consumer}.dlq", key=b"case-x", value=b"not avro", headers=dead_letter_headers(consumer, dl))
    assert p.flush(10) == 0
    try:
        yield consumer, "0:0"
    finally:
        delete_topics(kafka_bootstrap, [f"{consumer}.dlq", f"{consumer}.redrive"])


@pytest.fixture(scope="module")
def world(infra_env: dict[str, str], dead_letter: tuple[str, str]) -> Iterator[list[str]]:
    for port in (CONSOLE_PORT, SAGAS_PORT, ATTACKER_PORT):
        if not _free(port):
            pytest.fail(f"port {port} is taken (another console test running?)", pytrace=False)
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    consumer, label = dead_letter
    resolved: list[str] = []
    env = dict(infra_env, CASESTREAM_CONSOLE_PORT=str(CONSOLE_PORT),
               CASESTREAM_CONSOLE_SERVICES=json.dumps({"saga": f"http://127.0.0.1:{SAGAS_PORT}"}),
               CASESTREAM_CONSOLE_SAGAS_URL=f"http://127.0.0.1:{SAGAS_PORT}",
               CASESTREAM_CONSOLE_CONSUMERS=json.dumps([consumer]),
               CASESTREAM_CONSOLE_DEADLETTER_CACHE_S="0")
    with Served(saga_recorder(resolved), SAGAS_PORT), Served(attacker_pages(consumer, label), ATTACKER_PORT), \
            console_process(env=env, log_dir=SHOTS / "logs", timeout_s=60):
        yield resolved


@pytest.fixture(scope="module")
def browser(world: list[str]) -> Iterator[Any]:
    with headless_chromium(implicit_wait_s=1) as driver:
        yield driver


def body_text(driver: Any) -> str:
    """The page's text; "" while a navigation replaces the body being read."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        return str(driver.find_element("tag name", "body").text)
    except StaleElementReferenceException:
        return ""


def sign_in(driver: Any) -> None:
    driver.get(f"{CONSOLE}/login")
    driver.find_element("id", "token").send_keys(VICTIM)
    driver.find_element("id", "login").click()
    wait_for(lambda: "victim-sup" in body_text(driver), 10, "the victim signed in",
             describe=lambda: f"{driver.current_url}: {body_text(driver)[:500]}")


def signed_in_as(driver: Any) -> str:
    driver.get(f"{CONSOLE}/journeys")
    return driver.find_element("tag name", "header").text


def open_dead_letters(bootstrap: str, consumer: str) -> list[str]:
    return [e.label for e in load_dead_letter_state(bootstrap, consumer).open]


def test_pages_elsewhere_cannot_act_sign_in_or_frame_the_console(
        browser: Any, world: list[str], dead_letter: tuple[str, str], kafka_bootstrap: str) -> None:
    driver, resolved = browser, world
    consumer, label = dead_letter
    sign_in(driver)
    assert open_dead_letters(kafka_bootstrap, consumer) == [label]
    for site in (SAME_SITE, CROSS_SITE):
        for attack in ("resolve", "discard", "redrive", "login"):
            driver.get(f"{site}/{attack}")
            # the form posts itself at load; the browser then shows the console's answer
            wait_for(lambda: driver.current_url.startswith(CONSOLE), 10, f"{attack} from {site} to post")
            time.sleep(0.5)
            driver.save_screenshot(str(SHOTS / f"{attack}-{site.split('//')[1].split(':')[0]}.png"))
            assert resolved == [], f"{attack} from {site} resolved the saga"
            assert open_dead_letters(kafka_bootstrap, consumer) == [label], f"{attack} from {site} acted"
            who = signed_in_as(driver)
            assert "victim-sup" in who and "mallory" not in who, f"{attack} from {site}: {who}"
        driver.get(f"{site}/frame")
        driver.save_screenshot(str(SHOTS / f"frame-{site.split('//')[1].split(':')[0]}.png"))
        driver.switch_to.frame(driver.find_element("id", "victim"))
        try:
            shown = driver.find_elements("css selector", "header, #token, #consumers")
            assert not shown, f"the console was shown in a frame on {site}"
        finally:
            driver.switch_to.default_content()

    # the console's own pages do act: the attacks above were refused, not lost
    driver.get(f"{CONSOLE}/sagas")
    row = driver.find_element("id", "manual-review")
    row.find_element("css selector", "input.reason").send_keys("reviewed by the supervisor")
    row.find_element("css selector", "button.resolve").click()
    wait_for(lambda: resolved == [SAGA_ID], 10, "the saga resolved from the console's own page")
    driver.get(f"{CONSOLE}/deadletters?consumer={consumer}")
    driver.find_element("css selector", "input.pick").click()
    driver.find_element("id", "reason").send_keys("not needed")
    driver.find_element("id", "discard").click()
    wait_for(lambda: open_dead_letters(kafka_bootstrap, consumer) == [], 20,
             "the dead letter discarded from the console's own page",
             describe=lambda: driver.find_element("tag name", "main").text[:800])
    # logging out ends the session on the server: the old cookie is refused
    cookie = next(c for c in driver.get_cookies() if c["name"] == "casestream_session")
    driver.find_element("id", "logout").click()
    driver.add_cookie({"name": "casestream_session", "value": cookie["value"], "path": "/"})
    driver.get(f"{CONSOLE}/journeys")
    assert driver.current_url.startswith(f"{CONSOLE}/login"), driver.current_url
    # the console's edge is measured as a service's is
    import httpx

    metrics = httpx.get(f"{CONSOLE}/metrics", timeout=10)
    assert metrics.status_code == 200 and 'http_server_duration_seconds_count{method="POST"' in metrics.text, \
        metrics.text[:2000]
