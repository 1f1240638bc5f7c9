"""The console's sign-in, role checks and input checks (in process, no Kafka reached)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app

pytestmark = pytest.mark.unit


@pytest.fixture
def client() -> TestClient:
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=None, services={}, consumers=[], journey_topics=[])
    return TestClient(console_app(sources, TokenVerifier(AuthSettings())), follow_redirects=False)


def bearer(*roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token('tenant-a', roles, subject='alice')}"}


def test_pages_need_a_token_and_send_the_browser_to_sign_in(client: TestClient) -> None:
    r = client.get("/journeys")
    assert r.status_code == 303 and r.headers["location"].startswith("/login?")
    assert client.get("/journeys", headers={"Authorization": "Bearer nope"}).status_code == 303
    assert client.post("/deadletters/c", data={"action": "redrive"}).status_code == 401


def test_sign_in_keeps_a_valid_token_in_a_strict_http_only_cookie(client: TestClient) -> None:
    assert client.post("/login", data={"token": "garbage"}).status_code == 401
    token = dev_token("tenant-a", (ROLE_OFFICER,), subject="alice")
    r = client.post("/login", data={"token": token, "next": "https://evil.example/"})
    assert r.status_code == 303 and r.headers["location"] == "/journeys"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = client.get("/journeys")
    assert page.status_code == 200 and "alice" in page.text and 'id="case_id"' in page.text


def test_actions_need_the_supervisor_role(client: TestClient) -> None:
    officer = bearer(ROLE_OFFICER)
    r = client.post("/deadletters/c", data={"action": "redrive", "label": "0:1", "reason": "x"}, headers=officer)
    assert r.status_code == 403 and "supervisor" in r.text
    assert client.post("/sagas/s1/resolve", data={"reason": "x"}, headers=officer).status_code == 403


def test_an_action_without_a_reason_or_a_selection_is_refused(client: TestClient) -> None:
    sup = bearer(ROLE_SUPERVISOR)
    r = client.post("/sagas/s1/resolve", data={"reason": "  "}, headers=sup)
    assert r.status_code == 400 and "reason" in r.text
    r = client.post("/deadletters/c", data={"action": "redrive", "reason": "x"}, headers=sup)
    assert r.status_code == 400 and "choose at least one" in r.text


def test_a_journey_whose_messages_cannot_be_decoded_answers_an_operator_503_with_the_reason(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import casestream.console.app as app_module
    from casestream.operations import Journey

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
