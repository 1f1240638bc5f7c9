"""The console's sign-in, sessions, CSRF defences, headers, edge limits, bounded reads, role
and input checks (in process, no Kafka reached: the reads are replaced where a page needs one)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import casestream.console.app as app_module
from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.operations import Journey

CONSUMER = "billing.ledger"


def make_client(production: bool = False, base_url: str = "http://testserver", **settings: Any) -> TestClient:
    sources = ConsoleSources(settings=ConsoleSettings(**settings), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=None, services={}, consumers=[CONSUMER], journey_topics=[])
    return TestClient(console_app(sources, TokenVerifier(AuthSettings()), production=production),
                      base_url=base_url, follow_redirects=False)


@pytest.fixture
def client() -> TestClient:
    return make_client()


def bearer(*roles: str, tenant: str = "tenant-a") -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(tenant, roles, subject='alice')}"}


def csrf_in(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def sign_in(client: TestClient, *roles: str, tenant: str = "tenant-a") -> str:
    """Sign in through the form; returns the session's CSRF token (from a page's log-out form)."""
    form = client.get("/login")
    token = dev_token(tenant, roles, subject="alice")
    r = client.post("/login", data={"token": token, "csrf": csrf_in(form.text), "next": "/journeys"})
    assert r.status_code == 303, r.text
    return csrf_in(client.get("/journeys").text)


def test_pages_need_a_token_and_send_the_browser_to_sign_in(client: TestClient) -> None:
    r = client.get("/journeys")
    assert r.status_code == 303 and r.headers["location"].startswith("/login?")
    assert client.get("/journeys", headers={"Authorization": "Bearer nope"}).status_code == 303
    assert client.post("/deadletters/c", data={"action": "redrive"}).status_code == 401


def test_the_session_cookie_is_a_random_id_not_the_bearer_token_and_logout_revokes_it(client: TestClient) -> None:
    form = client.get("/login")
    token = dev_token("tenant-a", (ROLE_OFFICER,), subject="alice")
    assert client.post("/login", data={"token": "garbage", "csrf": csrf_in(form.text)}).status_code == 401
    r = client.post("/login", data={"token": token, "csrf": csrf_in(client.get("/login").text),
                                    "next": "https://evil.example/"})
    assert r.status_code == 303 and r.headers["location"] == "/journeys"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    sid = client.cookies.get("casestream_session")
    assert sid and token not in cookie and sid != token and len(sid) >= 40
    page = client.get("/journeys")
    assert page.status_code == 200 and "alice" in page.text and 'id="case_id"' in page.text
    # the cookie's value is worth nothing as a bearer token on a service
    assert client.get("/journeys", headers={"Authorization": f"Bearer {sid}"}).status_code == 303
    out = client.post("/logout", data={"csrf": csrf_in(page.text)})
    assert out.status_code == 303
    # the same id sent again after log-out (a copied cookie): the session is gone on the server
    client.cookies.set("casestream_session", sid)
    assert client.get("/journeys").status_code == 303


def test_a_session_ends_after_its_lifetime() -> None:
    client = make_client(session_ttl_s=0.3)
    sign_in(client, ROLE_OFFICER)
    assert client.get("/journeys").status_code == 200
    time.sleep(0.5)
    r = client.get("/journeys")
    assert r.status_code == 303 and "session" in r.headers["location"]


def test_the_cookie_is_secure_and_host_prefixed_in_production_and_by_setting() -> None:
    https = "https://testserver"  # a Secure cookie is sent back over https only
    for client in (make_client(production=True, base_url=https), make_client(cookie_secure=True, base_url=https)):
        form = client.get("/login")
        assert "Secure" in form.headers["set-cookie"]
        r = client.post("/login", data={"token": dev_token("tenant-a", (ROLE_OFFICER,)),
                                        "csrf": csrf_in(form.text)})
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("__Host-casestream_session=") and "Secure" in cookie and "Path=/" in cookie
    dev = make_client(production=True, cookie_secure=False, base_url=https)
    r = dev.post("/login", data={"token": dev_token("tenant-a", (ROLE_OFFICER,)),
                                 "csrf": csrf_in(dev.get("/login").text)})
    assert "Secure" not in r.headers["set-cookie"]


def test_login_needs_the_sign_in_forms_own_token(client: TestClient) -> None:
    token = dev_token("tenant-a", (ROLE_SUPERVISOR,), subject="mallory")
    r = client.post("/login", data={"token": token})  # login CSRF: no pre-session, no token
    assert r.status_code == 403 and "csrf" in r.text and "casestream_session" not in r.headers.get("set-cookie", "")
    client.get("/login")
    assert client.post("/login", data={"token": token, "csrf": "guessed"}).status_code == 403


def test_every_state_changing_form_needs_the_sessions_csrf_token(client: TestClient) -> None:
    csrf = sign_in(client, ROLE_SUPERVISOR)
    for path, data in (("/sagas/s1/resolve", {"reason": "x"}),
                       (f"/deadletters/{CONSUMER}", {"action": "discard", "label": "0:1", "reason": "x"}),
                       ("/logout", {})):
        r = client.post(path, data=data)
        assert r.status_code == 403 and "csrf" in r.text, path
        assert client.post(path, data={**data, "csrf": csrf + "x"}).status_code == 403, path
    r = client.post("/sagas/s1/resolve", data={"reason": " ", "csrf": csrf})
    assert r.status_code == 400 and "reason" in r.text  # past the CSRF check
    assert client.get("/journeys").status_code == 200  # the session survived the refused log-outs


def test_cross_origin_posts_are_refused_whatever_the_cookie(client: TestClient) -> None:
    csrf = sign_in(client, ROLE_SUPERVISOR)
    data = {"reason": "x", "csrf": csrf}
    for headers in ({"Origin": "http://127.0.0.1:9999"},            # same site, another port
                    {"Origin": "http://localhost:18100"},           # another site
                    {"Origin": "null"},                              # sandboxed frame
                    {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"}):
        r = client.post("/sagas/s1/resolve", data={**data, "reason": " "}, headers=headers)
        assert r.status_code == 403 and "this console" in r.text, headers
        assert client.post("/login", data={"token": "t"}, headers=headers).status_code == 403, headers
    same = client.post("/sagas/s1/resolve", data={**data, "reason": " "},
                       headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 400  # its own origin: on to the reason check


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    sign_in(client, ROLE_OFFICER)
    answers = [client.get("/login"), client.get("/journeys"), client.get("/nowhere"),
               client.get("/static/console.css"), client.post("/login", data={"token": "x"})]
    for r in answers:
        h = r.headers
        assert "default-src 'self'" in h["content-security-policy"], r.url
        assert "frame-ancestors 'none'" in h["content-security-policy"], r.url
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff", r.url
        assert h["cache-control"] == "no-store" and h["referrer-policy"] == "same-origin", r.url
    assert "<style>" not in answers[1].text and "<script>" not in answers[1].text  # nothing inline


def test_a_large_form_body_is_refused_before_any_token_is_checked(client: TestClient) -> None:
    size = 48 * 1024 * 1024
    r = client.post("/deadletters/c", content=b"", headers={
        "Content-Length": str(size), "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    r = client.post("/login", content=b"token=" + b"a" * 20_000,
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413


def test_actions_need_the_supervisor_role(client: TestClient) -> None:
    officer = bearer(ROLE_OFFICER)
    r = client.post(f"/deadletters/{CONSUMER}", data={"action": "redrive", "label": "0:1", "reason": "x"},
                    headers=officer)
    assert r.status_code == 403 and "supervisor" in r.text
    assert client.post("/sagas/s1/resolve", data={"reason": "x"}, headers=officer).status_code == 403


def test_an_action_without_a_reason_or_a_selection_is_refused(client: TestClient) -> None:
    sup = bearer(ROLE_SUPERVISOR)
    r = client.post("/sagas/s1/resolve", data={"reason": "  "}, headers=sup)
    assert r.status_code == 400 and "reason" in r.text
    r = client.post(f"/deadletters/{CONSUMER}", data={"action": "redrive", "reason": "x"}, headers=sup)
    assert r.status_code == 400 and "choose at least one" in r.text


def test_an_unknown_consumer_is_refused_before_kafka_is_asked(client: TestClient,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def no_kafka(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("Kafka asked about an unknown consumer")

    for name in ("load_dead_letter_state", "redrive_dead_letters", "discard_dead_letters", "dead_letter_counts"):
        monkeypatch.setattr(app_module, name, no_kafka)
    sup = bearer(ROLE_SUPERVISOR, ROLE_OPERATOR)
    for action in ("redrive", "discard"):
        r = client.post("/deadletters/made-up.consumer", headers=sup,
                        data={"action": action, "label": "0:1", "reason": "x"})
        assert r.status_code == 400 and "consumer: unknown made-up.consumer" in r.text, action
    r = client.get("/deadletters?consumer=made-up.consumer", headers=sup)
    assert r.status_code == 400 and "made-up.consumer" in r.text


class FakeEntry:
    def __init__(self, label: str, tenant: str) -> None:
        self.label, self.tenant = label, tenant
        self.record = type("R", (), {"value": tenant.encode()})()
        self.state = "open"
        self.event_type = self.key = self.reason = self.message = self.attempts = None
        self.first_failure = self.last_failure = None


class TenantCodec:
    def decode(self, value: bytes) -> Any:
        return type("Env", (), {"tenant_id": value.decode(), "payload": {}})()


def test_dead_letter_counts_are_per_tenant_unless_the_role_is_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=TenantCodec(), services={}, consumers=[CONSUMER], journey_topics=[])
    client = TestClient(console_app(sources, TokenVerifier(AuthSettings())), follow_redirects=False)
    entries = [FakeEntry("0:1", "tenant-a"), FakeEntry("0:2", "tenant-a"), FakeEntry("0:3", "tenant-c")]
    monkeypatch.setattr(app_module, "dead_letter_counts", lambda *_a, **_k: {CONSUMER: 3, "other.x": 7})
    monkeypatch.setattr(app_module, "read_actions", lambda *_a, **_k: [])
    monkeypatch.setattr(app_module, "load_dead_letter_state",
                        lambda *_a, **_k: type("S", (), {"open": entries})())
    b = client.get("/deadletters", headers=bearer(ROLE_OFFICER, tenant="tenant-b")).text
    assert f'data-consumer="{CONSUMER}">0<' in b and "<td>3</td>" not in b and "all tenants" not in b
    assert "other.x" not in b  # a dead-letter topic of no configured consumer is not listed
    a = client.get("/deadletters", headers=bearer(ROLE_OFFICER, tenant="tenant-a")).text
    assert f'data-consumer="{CONSUMER}">2<' in a and "<td>3</td>" not in a
    op = client.get("/deadletters", headers=bearer(ROLE_OPERATOR, tenant="tenant-b")).text
    assert f'data-consumer="{CONSUMER}">3<' in op and "<td>3</td>" in op


def test_expensive_reads_are_bounded_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    client = make_client(expensive_concurrency=1, journey_cache_s=60)
    release, started, calls = threading.Event(), threading.Event(), []

    def slow(_kafka: Any, case_id: str, *_a: Any, **_k: Any) -> Journey:
        calls.append(case_id)
        started.set()
        release.wait(10)
        return Journey(case_id, ())

    monkeypatch.setattr(app_module, "load_journey", slow)
    officer = bearer(ROLE_OFFICER)
    first: list[int] = []
    t = threading.Thread(target=lambda: first.append(client.get("/journeys?case_id=C1", headers=officer).status_code))
    t.start()
    assert started.wait(5)
    r = client.get("/journeys?case_id=C2", headers=officer)
    assert r.status_code == 503 and r.headers["retry-after"] == "2" and "retry" in r.text
    release.set()
    t.join(10)
    assert first == [404]
    assert client.get("/journeys?case_id=C1", headers=officer).status_code == 404
    assert calls == ["C1"]  # the second C1 was the cached read


def test_a_journey_whose_messages_cannot_be_decoded_answers_an_operator_503_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = make_client(journey_cache_s=0)
    monkeypatch.setattr(app_module, "load_journey", lambda *a, **k: Journey(
        "C1", (), undecodable=2, decode_error="outbox.event.case[1]@9: RegistryUnavailable: <b>down</b>"))
    officer = client.get("/journeys?case_id=C1", headers=bearer(ROLE_OFFICER))
    assert officer.status_code == 404 and "RegistryUnavailable" not in officer.text  # no tenant: not theirs
    r = client.get("/journeys?case_id=C1", headers=bearer(ROLE_OPERATOR))
    assert r.status_code == 503
    assert "2 message(s) of case C1 could not be decoded" in r.text
    assert "RegistryUnavailable: &lt;b&gt;down&lt;/b&gt;" in r.text  # escaped
    monkeypatch.setattr(app_module, "load_journey", lambda *a, **k: Journey("C1", ()))
    assert client.get("/journeys?case_id=C1", headers=bearer(ROLE_OPERATOR)).status_code == 404


def test_the_console_refuses_to_start_in_production_on_the_development_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.cli.main import main

    for name in ("CASESTREAM_AUTH_JWT_KEY", "CASESTREAM_AUTH_JWT_KEY_FILE", "CASESTREAM_AUTH_JWKS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CASESTREAM_ENV", "production")
    monkeypatch.setenv("CASESTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # never reached
    import uvicorn

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: served.append(a))
    r = CliRunner().invoke(main, ["console", "--port", "18999"])
    assert r.exit_code == 1 and not served, r.output
    assert "CASESTREAM_ENV=production refuses" in r.output, r.output
    assert re.search(r"^\s+CASESTREAM_AUTH_JWT_KEY\b.*development key", r.output, re.MULTILINE), r.output
    assert "Traceback" not in r.output


def test_a_signed_in_client_is_rate_limited_but_not_for_the_pages_assets() -> None:
    client = make_client(rate_client_per_s=0.01, rate_client_burst=3)
    headers = bearer(ROLE_OFFICER)
    for _ in range(10):
        assert client.get("/static/console.css", headers=headers).status_code == 200
    assert [client.get("/journeys", headers=headers).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_a_flood_of_sign_in_forms_does_not_end_signed_in_sessions() -> None:
    client = make_client(max_sessions=5)
    sign_in(client, ROLE_OFFICER)
    for _ in range(20):  # anyone may open the sign-in form
        assert client.get("/login").status_code == 200
    assert client.get("/journeys").status_code == 200
