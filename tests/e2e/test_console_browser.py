"""The operations console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium against the running suite.

One stack for every check: the shared suite stack (``suite_stack``, tests/e2e/conftest.py: the
five services on their default ports and databases, audit's ``dead_letter_open`` refreshed
every second), and ``casestream console`` on 18400 pointed at them by configuration
(``CASESTREAM_CONSOLE_SERVICES``); the scenario follows a case of its own. Screenshots of each
page are written to ``.local/test-output/console/`` (kept after the run, to look at).

Kafka consumer groups are shared with any other stack on the same broker (group id =
consumer name): run this test when no other casestream stack consumes from that broker.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR, dev_token
from casestream.consumer import DeadLetter
from casestream.consumer.deadletters import dead_letter_headers, read_topic
from casestream.operations import read_actions
from casestream.operations.deadletters import load_dead_letter_state
from casestream.service.devstack import ServiceStack, console_process, service_port
from services.demo import CaseSpec
from tests.support.browser import headless_chromium
from tests.support.waiting import wait_for

SERVICES = ("case", "audit", "saga", "decision", "notification")
PORTS = {name: service_port(name) for name in SERVICES}  # the shared stack's (default) ports
CONSOLE_PORT = 18400
CONSOLE = f"http://127.0.0.1:{CONSOLE_PORT}"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".local" / "test-output" / "console"
TENANT = "tenant-a"
SUPERVISOR = dev_token(TENANT, (ROLE_SUPERVISOR, ROLE_OFFICER), subject="sup-alice")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.3)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def url(service: str, path: str) -> str:
    return f"http://127.0.0.1:{PORTS[service]}{path}"


@pytest.fixture(scope="module")
def suite(suite_stack: ServiceStack) -> Iterator[ServiceStack]:
    if not _free(CONSOLE_PORT):
        pytest.fail(f"port {CONSOLE_PORT} is taken (another console test running?)", pytrace=False)
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    console_env = dict(suite_stack.env, CASESTREAM_CONSOLE_PORT=str(CONSOLE_PORT),
                       CASESTREAM_CONSOLE_SERVICES=json.dumps(
                           {n: f"http://127.0.0.1:{p}" for n, p in PORTS.items()}))
    with console_process(env=console_env, log_dir=SHOTS / "logs") as base:
        assert base == CONSOLE
        yield suite_stack


@pytest.fixture(scope="module")
def browser(suite: ServiceStack) -> Iterator[object]:
    with headless_chromium(implicit_wait_s=2) as driver:
        driver.get(f"{CONSOLE}/login")
        driver.find_element("id", "token").send_keys(SUPERVISOR)
        driver.find_element("id", "login").click()
        yield driver


def headers_named(driver) -> list[str]:  # noqa: ANN001
    """The text of every table header of the page shown (folded ones too: read from the DOM),
    checked to be non-empty."""
    from selenium.common.exceptions import StaleElementReferenceException

    def read() -> list[str] | None:
        try:  # the Flow page's script replaces its tables every 2 s
            return [th.get_attribute("textContent") for th in driver.find_elements("css selector", "th")]
        except StaleElementReferenceException:
            return None

    heads = wait_for(read, 10, "the page's table headers")
    assert heads and all(h.strip() for h in heads), f"a table column without a header: {heads}"
    return heads


def shot(driver, name: str) -> Path:  # noqa: ANN001
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def opened_with(driver, address: str, element_id: str, within_s: float = 30):  # noqa: ANN001, ANN201
    """The element ``element_id`` of the page at ``address``, loading it again while it is missing
    (a page that answered 503 on a loaded box); fails with the text of the last page shown."""
    def found():  # noqa: ANN202
        driver.get(address)
        return (driver.find_elements("id", element_id) or [None])[0]

    return wait_for(found, within_s, f"#{element_id} on {address}", step_s=2,
                    describe=lambda: driver.find_element("tag name", "body").text[:2000])


def open_case(body: dict[str, object]) -> str:
    token = dev_token(TENANT, (ROLE_OFFICER,), subject="demo-officer")
    h = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10) as client:
        opened = client.post(url("case", "/cases"), json=body, headers=h)
        assert opened.status_code == 201, opened.text
        case_id = opened.json()["id"]
        r = client.post(url("case", f"/cases/{case_id}/submit"), json={},
                        headers={**h, "Idempotency-Key": str(uuid.uuid4())})
        assert r.status_code in (200, 202), r.text
    return case_id


def saga_of(case_id: str) -> dict | None:
    r = httpx.get(url("saga", f"/sagas?case_id={case_id}"), timeout=5,
                  headers={"Authorization": f"Bearer {SUPERVISOR}"})
    items = r.json().get("items", []) if r.status_code == 200 else []
    return items[0] if items else None


def test_console_pages_and_actions_in_a_browser(browser, suite: ServiceStack, kafka_bootstrap: str) -> None:  # noqa: ANN001
    try:
        scenario(browser, suite, kafka_bootstrap)
    except BaseException:
        shot(browser, "failure")  # the page the scenario stopped on
        raise


def scenario(driver, suite: ServiceStack, kafka_bootstrap: str) -> None:  # noqa: ANN001
    body = CaseSpec(title="Case console unreachable reporter", severity=4, evidence_count=2,
                    expected="violation").body()
    body["reporter_email"] = "nobody@fail.invalid"  # the notice fails: the saga goes to MANUAL_REVIEW
    case_id = open_case(body)
    saga = wait_for(lambda: (s := saga_of(case_id)) and s["state"] == "MANUAL_REVIEW" and s, 60,
                    "the saga in MANUAL_REVIEW")

    # 1. a journey: the case's events across services, in order, with causation arrows
    timeline = opened_with(driver, f"{CONSOLE}/journeys?case_id={case_id}", "timeline").text
    for event_type in ("CaseOpened", "CaseSubmitted", "DecisionRequested", "NoticeRequested"):
        assert event_type in timeline, timeline
    assert timeline.index("CaseOpened") < timeline.index("CaseSubmitted") < timeline.index("DecisionRequested")
    assert driver.find_elements("css selector", "a.arrow"), "no causation arrows drawn"
    assert "MANUAL_REVIEW" in driver.find_element("id", "case-sagas").text
    shot(driver, "journey")

    # 2. resolve the manual-review saga with a reason
    driver.get(f"{CONSOLE}/sagas")
    review = driver.find_element("id", "manual-review")
    row = next(r for r in review.find_elements("css selector", "tbody tr") if saga["saga_id"] in r.text)
    assert f"journey of {case_id}" in row.text
    assert "MANUAL_REVIEW" in driver.find_element("id", "counts").text  # by definition and state
    assert "sagas{state=" not in driver.find_element("tag name", "body").text
    headers_named(driver)
    shot(driver, "sagas")
    row.find_element("css selector", "input.reason").send_keys("notice delivered by registered post")
    row.find_element("css selector", "button.resolve").click()
    assert "resolved" in driver.find_element("id", "done").text
    wait_for(lambda: (s := saga_of(case_id)) and s["state"] == "COMPLETED", 60, "the saga completed")
    resolved = [a for a in read_actions(kafka_bootstrap) if a.action == "saga.resolve" and a.target == saga["saga_id"]]
    assert resolved and resolved[-1].actor == "sup-alice" and resolved[-1].reason == "notice delivered by registered post"

    # 3. a dead letter (a real event of the case, dead-lettered for audit.journal): re-drive it, see it resolved
    # the gauge counts every open dead letter of audit.journal on the broker, other tests' and
    # earlier runs' too: this one counted, it must come back to what it was before
    gauge = re.compile(r'^dead_letter_open\{consumer="audit\.journal"\} (\S+)$', re.MULTILINE)

    def open_dead_letters() -> float | None:
        found = gauge.search(httpx.get(url("audit", "/metrics"), timeout=5).text)
        return float(found.group(1)) if found else None

    before = wait_for(lambda: (n := open_dead_letters()) is not None and (n,), 30,
                      "audit's dead_letter_open gauge")[0]
    [original] = [r for r in read_topic(kafka_bootstrap, "outbox.event.case")
                  if r.key == case_id.encode() and r.header("type") == "CaseOpened"]
    now = datetime.now(timezone.utc)
    dl = DeadLetter(record=original, error_class="builtins.RuntimeError", reason="retries_exhausted",
                    message="database unavailable for inspector@example.org", attempts=5,
                    first_failure=now, last_failure=now)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce("audit.journal.dlq", key=original.key, value=original.value,
                     headers=dead_letter_headers("audit.journal", dl))
    assert producer.flush(10) == 0
    driver.get(f"{CONSOLE}/deadletters?consumer=audit.journal")
    table = driver.find_element("id", "dead-letters").text
    assert "CaseOpened" in table and "retries_exhausted" in table
    assert "inspector@example.org" not in table and "<email>" in table  # redacted
    # another tenant does not see it
    other = httpx.get(f"{CONSOLE}/deadletters?consumer=audit.journal", timeout=20, headers={
        "Authorization": f"Bearer {dev_token('tenant-b', (ROLE_OFFICER,), subject='bob')}"})
    assert 'data-consumer="audit.journal">0<' in other.text
    headers_named(driver)
    shot(driver, "deadletters-open")
    groups = opened_with(driver, f"{CONSOLE}/deadletters/groups?consumer=audit.journal", "groups").text
    assert "handler_error" in groups and "CaseOpened" in groups and "RuntimeError" in groups
    shot(driver, "deadletter-groups")
    driver.get(f"{CONSOLE}/deadletters?consumer=audit.journal")
    driver.find_element("css selector", "input.pick").click()
    driver.find_element("id", "reason").send_keys("journal database back")
    driver.find_element("id", "redrive").click()
    assert "re-drove 1" in driver.find_element("id", "done").text

    def resolved_in_page() -> bool:
        driver.get(f"{CONSOLE}/deadletters?consumer=audit.journal")
        return bool(driver.find_elements("id", "no-open"))

    def why_still_open() -> str:
        state = load_dead_letter_state(kafka_bootstrap, "audit.journal")
        entries = [f"{e.label} {e.state} {e.origin} redrive={e.redrive_count}" for e in state.entries
                   if e.key == case_id]
        log = suite.log_dir / "audit.log" if suite.log_dir else None
        lines = log.read_text(errors="replace").splitlines() if log and log.exists() else []
        assigned = [sorted(set(re.findall(r"([\w.-]+)\[\d+\]", ln))) for ln in lines
                    if "audit.journal: assigned" in ln]
        errors = [ln[:400] for ln in lines if '"ERROR"' in ln]
        return (f"entries of the case {entries}; audit.journal's last assignment (topics) "
                f"{assigned[-1:]}; audit errors {errors[-3:]}")

    wait_for(resolved_in_page, 60, "the dead letter resolved in the console", describe=why_still_open)
    shot(driver, "deadletters-resolved")
    # the audit process re-reads the topics every second, on a loaded box more slowly
    wait_for(lambda: open_dead_letters() == before, 60,
             f"audit's dead_letter_open back to {before:.0f}", describe=open_dead_letters)

    # 3b. a poison dead letter (schema resolution: non-retryable; decodable, so the tenant's
    # supervisor sees it): the group's re-drive asks for a confirmation first; it is discarded instead
    # another message of the case: an entry of the re-driven one's origin would count as resolved
    poisoned = next(r for r in read_topic(kafka_bootstrap, "outbox.event.case")
                    if r.key == case_id.encode() and r.offset != original.offset)
    poison = DeadLetter(record=poisoned, error_class="casestream.errors.SchemaResolutionError",
                        reason="schema_resolution", message=f"no symbol for {case_id}", attempts=1,
                        first_failure=now, last_failure=now)
    producer.produce("audit.journal.dlq", key=poisoned.key, value=poisoned.value,
                     headers=dead_letter_headers("audit.journal", poison))
    assert producer.flush(10) == 0

    def poison_group():  # noqa: ANN202
        driver.get(f"{CONSOLE}/deadletters/groups?consumer=audit.journal")
        return next((g for g in driver.find_elements("css selector", "section[id^=g-]")
                     if "schema_resolution is not retryable" in g.text), None)

    group = wait_for(poison_group, 30, "the schema-resolution group with its warning")
    assert "not retryable" in group.text
    shot(driver, "deadletter-groups-poison")
    group.find_element("css selector", "input[name=reason]").send_keys("try once more")
    group.find_element("css selector", "button[value=redrive]").click()
    assert "non-retryable" in driver.find_element("id", "confirm-needed").text
    assert driver.find_elements("id", "confirm")  # an explicit confirmation step, nothing re-driven yet
    shot(driver, "deadletter-group-confirm")
    # re-drive after deploy compares the builds the consumer's members run; the suite's services
    # run without CASESTREAM_BUILD, so the request is refused, saying why, and nothing recorded
    group = poison_group()
    group.find_element("css selector", "input[name=reason]").send_keys("fixed in the next build")
    group.find_element("css selector", "button[value=redrive-after-deploy]").click()
    refused = driver.find_element("css selector", "p.bad").text
    assert "reports no build" in refused and "CASESTREAM_BUILD" in refused, refused
    shot(driver, "deadletter-group-after-deploy-refused")
    assert not [a for a in read_actions(kafka_bootstrap) if a.reason == "fixed in the next build"]
    group = poison_group()
    group.find_element("css selector", "input[name=reason]").send_keys("poison test entry")
    group.find_element("css selector", "button[value=discard]").click()
    assert "discard" in driver.find_element("id", "done").text
    discarded = [a for a in read_actions(kafka_bootstrap) if a.reason == "poison test entry"]
    assert discarded and discarded[-1].actor == "sup-alice"

    # 4. lag rises while audit is stopped and falls once it runs again
    driver.get(f"{CONSOLE}/flow")
    # caught up, a service is folded away; behind, it is listed first
    assert "case" in driver.find_element("id", "flow").get_attribute("textContent")
    suite.stop("audit")
    for i in range(3):
        open_case(CaseSpec(title=f"Case console lag {i}", severity=1, evidence_count=0,
                           expected="no_violation").body())

    def audit_lag() -> int:
        from selenium.common.exceptions import StaleElementReferenceException

        try:  # the page's script replaces the tables every 2 s
            cells = driver.find_elements("css selector", 'span.lag[data-group="audit.journal"]')
            # a group at lag 0 is in the folded part: not displayed, its text read from the DOM
            return sum(int(c.get_attribute("textContent")) for c in cells) if cells else -1
        except StaleElementReferenceException:
            return -1

    wait_for(lambda: audit_lag() > 0, 30, "audit.journal's lag to rise on the flow page (refreshed by its script)")
    heads = headers_named(driver)  # the lag tables behind, with every column named
    assert {"group", "lag", "partitions behind", "note"} <= set(heads), heads
    shot(driver, "flow-lag")
    suite.start("audit")
    suite.wait_ready(["audit"])
    wait_for(lambda: audit_lag() == 0, 60, "audit.journal's lag to fall back to 0")
    shot(driver, "flow-caught-up")


# -- the ops pack: every metric the dashboard and the alert rules use is served -------------

PROMETHEUS_BUILTINS = {"up"}  # made by Prometheus itself, not by a service
# one series per open failure group: none at all while nothing is dead-lettered
SERIES_PER_OPEN_THING = {"dead_letter_group_open"}
# Served by CdcRetention, which runs instead of the relay only while Debezium publishes the outbox
# (the suite here runs relays): declared in METRIC_HELP and checked there instead.
SERIES_IN_CDC_MODE = {"outbox_cdc_lag_bytes", "outbox_cdc_slot_safe_wal_bytes"}
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "delta",
                "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "bool", "offset",
                "histogram_quantile", "irate", "topk", "bottomk", "abs", "clamp_min", "clamp_max"}


def queries() -> list[str]:
    import re

    import yaml

    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "casestream.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 15
    return [re.sub(r"\[[^\]]*\]", "", e) for e in exprs]  # range selectors out


def used_metrics(expr: str) -> dict[str, set[str]]:
    """Metric name -> label names the expression uses with it (matchers and by/without)."""
    import re

    out: dict[str, set[str]] = {}
    grouping = set()
    for labels in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        grouping |= {x.strip() for x in labels.split(",") if x.strip()}
    stripped = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", expr)
    stripped = re.sub(r'"[^"]*"', '""', stripped)
    for name, matchers in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", stripped):
        if name in PROMQL_WORDS or name.isdigit() or name in ("job", "le"):
            continue
        labels = set(re.findall(r"([a-zA-Z_]\w*)\s*[=!~]", matchers or ""))
        out.setdefault(name, set()).update(labels)
    for name in out:
        out[name] |= grouping
    return out


def test_every_metric_of_the_dashboard_and_rules_is_served_with_its_labels(suite: ServiceStack) -> None:
    from casestream.operations import parse_prometheus

    served: dict[str, set[str]] = {}
    for name in SERVICES:
        text = httpx.get(url(name, "/metrics"), timeout=5).text
        assert "process_resident_memory_bytes" in text and "casestream_build_info{" in text, name
        for (metric, labels), _ in parse_prometheus(text).items():
            served.setdefault(metric, set()).update(k for k, _ in labels)
    missing = []
    for expr in queries():
        for metric, labels in used_metrics(expr).items():
            if metric in PROMETHEUS_BUILTINS or metric in ("instance", "consumer", "relay", "state", "service",
                                                           "version", "outcome"):
                continue
            if metric not in served and metric in SERIES_PER_OPEN_THING:
                continue
            if metric not in served and metric in SERIES_IN_CDC_MODE:
                from casestream.telemetry.metrics import METRIC_HELP

                if metric not in METRIC_HELP:
                    missing.append(f"{metric} (in {expr!r}) is not a declared metric")
                continue
            if metric not in served:
                missing.append(f"{metric} (in {expr!r}) is on no service's /metrics")
            elif labels - served[metric] - {"job", "instance"}:
                missing.append(f"{metric} lacks labels {sorted(labels - served[metric])} (in {expr!r})")
    assert not missing, "\n".join(missing)
