"""The console's dead-letter failure groups: the grouped view, and re-drive / discard /
re-drive after deploy of a whole group (CSRF-checked, supervisor only, a confirmation step
for a non-retryable class, unknown consumer or group refused before anything is written).
Kafka is replaced by in-memory dead-letter state; the actions are recorded fakes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import casestream.console.app as app_module
from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR, AuthSettings, TokenVerifier, dev_token
from casestream.console import ConsoleSettings, ConsoleSources, console_app
from casestream.consumer.records import Record
from casestream.operations import DeadLetterEntry, DeadLetterState, failure_groups

CONSUMER = "billing.ledger"


def entry(offset: int, reason: str, message: str, tenant: str = "tenant-a",
          error_class: str = "ValueError") -> DeadLetterEntry:
    record = Record(f"{CONSUMER}.dlq", 0, offset, b"k", tenant.encode(), [], None)
    return DeadLetterEntry(consumer=CONSUMER, label=f"0:{offset}", state="open", event_id=f"e{offset}",
                           event_type="InvoiceIssued", key="k", reason=reason, error_class=error_class,
                           message=message, attempts="3", first_failure=f"2026-01-01T00:00:0{offset}Z",
                           last_failure=f"2026-01-01T00:01:0{offset}Z", redrive_count=0,
                           origin=f"billing[0]@{offset}", reference=False, record=record)


ENTRIES = (entry(1, "handler", "amount 12 too large"), entry(2, "handler", "amount 99 too large"),
           entry(3, "avro_decode", "bad bytes at 7", error_class="DecodeError"),
           entry(4, "handler", "amount 5 too large", tenant="tenant-c"))


class TenantCodec:
    def decode(self, value: bytes) -> Any:
        return type("Env", (), {"tenant_id": value.decode(), "payload": {}})()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], str]]:
    done: list[tuple[str, list[str], str]] = []
    monkeypatch.setattr(app_module, "dead_letter_counts", lambda *_a, **_k: {CONSUMER: len(ENTRIES)})
    monkeypatch.setattr(app_module, "load_dead_letter_state", lambda *_a, **_k: DeadLetterState(CONSUMER, ENTRIES))
    monkeypatch.setattr(app_module, "read_actions", lambda *_a, **_k: [])

    def act(name: str) -> Any:
        def fn(_kafka: Any, consumer: str, records: list[Record], *, actor: Any, reason: str, **_k: Any) -> Any:
            assert consumer == CONSUMER
            done.append((name, [f"{r.partition}:{r.offset}" for r in records], reason))
            return type("Done", (), {"detail": f"{name} {len(records)}"})()
        return fn

    monkeypatch.setattr(app_module, "redrive_dead_letters", act("redrive"))
    monkeypatch.setattr(app_module, "discard_dead_letters", act("discard"))

    def after_deploy(_kafka: Any, group: Any, *, actor: Any, reason: str, whole_group: bool, **_k: Any) -> Any:
        done.append(("after-deploy", [e.label for e in group.entries], f"{reason} whole={whole_group}"))
        return type("Done", (), {"detail": "waits for a deploy"})()

    monkeypatch.setattr(app_module, "request_redrive_after_deploy", after_deploy)
    return done


@pytest.fixture
def client() -> TestClient:
    sources = ConsoleSources(settings=ConsoleSettings(), kafka={"bootstrap.servers": "127.0.0.1:1"},
                             codec=TenantCodec(), services={}, consumers=[CONSUMER], journey_topics=[])
    return TestClient(console_app(sources, TokenVerifier(AuthSettings())), follow_redirects=False)


def bearer(*roles: str, tenant: str = "tenant-a") -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(tenant, roles, subject='alice')}"}


def fingerprints() -> dict[str, str]:
    """failure class -> fingerprint, over every tenant's entries."""
    return {g.failure_class: g.fingerprint for g in failure_groups(DeadLetterState(CONSUMER, ENTRIES))}


def test_the_grouped_view_lists_one_row_per_failure_group_with_count_and_sample(
        client: TestClient, calls: list[Any]) -> None:
    r = client.get("/deadletters/groups", headers=bearer(ROLE_OPERATOR))
    assert r.status_code == 200, r.text
    rows = re.findall(r"<tr>(.*?)</tr>", r.text.split('id="groups"')[1], re.S)[1:]
    assert len(rows) == 2, rows
    handler = next(row for row in rows if "handler_error" in row or "ValueError" in row)
    assert '<span class="num">3</span>' in handler and "InvoiceIssued" in handler
    assert "2026-01-01T00:00:01Z" in handler and "2026-01-01T00:01:04Z" in handler
    corrupt = next(row for row in rows if "DecodeError" in row)
    assert "non-retryable" in corrupt and '<span class="num">1</span>' in corrupt
    assert "<form" not in r.text.split("</table>")[1]  # an operator reads, a supervisor acts


def test_a_tenant_sees_only_its_own_entries_in_the_groups(client: TestClient, calls: list[Any]) -> None:
    r = client.get("/deadletters/groups", headers=bearer(ROLE_SUPERVISOR, tenant="tenant-a"))
    assert r.status_code == 200
    assert '<span class="num">2</span>' in r.text and '<span class="num">3</span>' not in r.text
    assert f'action="/deadletters/{CONSUMER}/groups/' in r.text
    assert client.get("/deadletters", headers=bearer(ROLE_OPERATOR)).text.count("/deadletters/groups") >= 1


def test_a_retryable_group_is_redriven_or_discarded_whole(client: TestClient, calls: list[Any]) -> None:
    sup = bearer(ROLE_SUPERVISOR, ROLE_OPERATOR)
    fp = next(fp for k, fp in fingerprints().items() if k != "corrupt_bytes")
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", headers=sup, data={"action": "redrive", "reason": "fixed"})
    assert r.status_code == 303 and r.headers["location"].startswith("/deadletters/groups?")
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", headers=sup, data={"action": "discard", "reason": "dup"})
    assert r.status_code == 303
    assert calls == [("redrive", ["0:1", "0:2", "0:4"], "fixed"), ("discard", ["0:1", "0:2", "0:4"], "dup")]


def test_a_non_retryable_group_needs_a_confirmation_or_after_deploy(client: TestClient, calls: list[Any]) -> None:
    sup = bearer(ROLE_SUPERVISOR, ROLE_OPERATOR)
    path = f"/deadletters/{CONSUMER}/groups/{fingerprints()['corrupt_bytes']}"
    r = client.post(path, headers=sup, data={"action": "redrive", "reason": "try"})
    assert r.status_code == 409 and "non-retryable" in r.text and 'name="confirm" value="yes"' in r.text
    assert calls == []
    assert client.post(path, headers=sup, data={"action": "redrive", "reason": "try", "confirm": "yes"}
                       ).status_code == 303
    assert client.post(path, headers=sup, data={"action": "redrive-after-deploy", "reason": "v2"}
                       ).status_code == 303
    # re-driven later by the consumer's service: here only the request, the whole group's
    assert calls == [("redrive", ["0:3"], "try"), ("after-deploy", ["0:3"], "v2 whole=True")]
    handler = next(fp for k, fp in fingerprints().items() if k != "corrupt_bytes")
    tenant_sup = bearer(ROLE_SUPERVISOR, tenant="tenant-a")  # sees tenant-a's entries alone
    assert client.post(f"/deadletters/{CONSUMER}/groups/{handler}", headers=tenant_sup,
                       data={"action": "redrive-after-deploy", "reason": "v3"}).status_code == 303
    assert calls[-1] == ("after-deploy", ["0:1", "0:2"], "v3 whole=False")


def test_requests_waiting_for_a_deploy_are_listed_with_their_builds(
        client: TestClient, calls: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.operations import ACTION_REDRIVE, ACTION_REDRIVE_AFTER_DEPLOY, OperatorAction

    def request(tenant: str, fp: str, action_id: str) -> OperatorAction:
        return OperatorAction(actor="bob", tenant=tenant, action=ACTION_REDRIVE_AFTER_DEPLOY, target=CONSUMER,
                              reason="fix in 2.1", items=("0:3",), action_id=action_id,
                              params={"fingerprint": fp, "failure_class": "corrupt_bytes", "builds": "2.0.0"})

    done = OperatorAction(actor="bob", action=ACTION_REDRIVE, target=CONSUMER, reason="r",
                          params={"request": "r-done"})
    actions = [request("tenant-a", "aaaa11112222", "r-wait"), request("tenant-a", "bbbb11112222", "r-done"),
               request("tenant-c", "cccc11112222", "r-other"), done]
    monkeypatch.setattr(app_module, "read_actions", lambda *_a, **_k: actions)
    page = client.get("/deadletters/groups", headers=bearer(ROLE_SUPERVISOR, tenant="tenant-a")).text
    waiting = page.split('id="after-deploy"')[1].split("</table>")[0]
    assert "aaaa11112222" in waiting and "2.0.0" in waiting and "fix in 2.1" in waiting
    assert "bbbb11112222" not in waiting  # carried out
    assert "cccc11112222" not in waiting  # another tenant's
    page = client.get("/deadletters/groups", headers=bearer(ROLE_OPERATOR)).text
    assert "cccc11112222" in page.split('id="after-deploy"')[1]


def test_bad_group_input_is_refused_before_anything_is_written(client: TestClient, calls: list[Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    sup = bearer(ROLE_SUPERVISOR, ROLE_OPERATOR)
    fp = fingerprints()["corrupt_bytes"]
    r = client.post(f"/deadletters/made-up.consumer/groups/{fp}", headers=sup,
                    data={"action": "discard", "reason": "x"})
    assert r.status_code == 400 and "consumer: unknown made-up.consumer" in r.text
    r = client.post(f"/deadletters/{CONSUMER}/groups/000000000000", headers=sup,
                    data={"action": "discard", "reason": "x"})
    assert r.status_code == 400 and "group: no open failure group 000000000000" in r.text
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", headers=sup, data={"action": "purge", "reason": "x"})
    assert r.status_code == 400 and "action:" in r.text
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", headers=sup, data={"action": "discard", "reason": " "})
    assert r.status_code == 400 and "reason: required" in r.text
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", headers=bearer(ROLE_OFFICER),
                    data={"action": "discard", "reason": "x"})
    assert r.status_code == 403
    assert client.get("/deadletters/groups?consumer=made-up.consumer", headers=sup).status_code == 400
    assert calls == []


def test_a_group_action_from_a_session_needs_its_csrf_token(client: TestClient, calls: list[Any]) -> None:
    form = client.get("/login")
    token = dev_token("tenant-a", (ROLE_SUPERVISOR,), subject="alice")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    assert client.post("/login", data={"token": token, "csrf": csrf, "next": "/journeys"}).status_code == 303
    fp = next(fp for k, fp in fingerprints().items() if k != "corrupt_bytes")
    page = client.get("/deadletters/groups").text
    session_csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}", data={"action": "discard", "reason": "x"})
    assert r.status_code == 403 and "csrf" in r.text and calls == []
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fp}",
                    data={"action": "discard", "reason": "x", "csrf": session_csrf})
    assert r.status_code == 303 and calls == [("discard", ["0:1", "0:2"], "x")]


def test_a_refused_request_says_why_and_leads_back_to_the_groups(
        client: TestClient, calls: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.consumer.deadletters import DeadLetterError

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise DeadLetterError("a member of consumer billing.ledger reports no build")

    monkeypatch.setattr(app_module, "request_redrive_after_deploy", refuse)
    r = client.post(f"/deadletters/{CONSUMER}/groups/{fingerprints()['corrupt_bytes']}",
                    headers=bearer(ROLE_SUPERVISOR, ROLE_OPERATOR), data={"action": "redrive-after-deploy",
                                                                         "reason": "v2"})
    assert r.status_code == 400 and "reports no build" in r.text
    assert f'href="/deadletters/groups?consumer={CONSUMER}" id="back"' in r.text
