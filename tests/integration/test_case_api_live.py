"""The case API over real HTTP: a live ``python -m services.case`` process (uvicorn) on real
PostgreSQL, Kafka (private broker) and the schema registry, with small edge limits.

Covers what only a running process shows: 401/403 with their challenges, another
tenant's case 404 on every read and write route, problem details for malformed input,
413/415/412, 429 with ``Retry-After`` per client and per tenant, 503 for a burst beyond
the in-flight limit (answered at once), and request deadlines that turn a stuck database
into a prompt 503 instead of a hung request; 40 slow bodies and 20 slow request lines do
not starve a normal client (bodies are read before an in-flight slot is taken, 408 after
the body read timeout). Also: the process refuses to start with the public development key
in production or with a weak key.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from test_case_api_support import REPO, LiveService, live_service_fixture

from casestream.auth.tokens import AuthSettings, bearer_headers, mint_token
from tests.support.case_app import assert_reads_but_cannot_write

MAX_IN_FLIGHT = 4
DEADLINE_S = 2.0
LIMITS = {
    "CASESTREAM_CASE_MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
    "CASESTREAM_CASE_REQUEST_DEADLINE_S": str(DEADLINE_S),
    "CASESTREAM_CASE_RATE_CLIENT_PER_S": "1", "CASESTREAM_CASE_RATE_CLIENT_BURST": "20",
    "CASESTREAM_CASE_RATE_TENANT_PER_S": "1", "CASESTREAM_CASE_RATE_TENANT_BURST": "50",
    "CASESTREAM_CASE_MAX_BODY_BYTES": "4096",
    "CASESTREAM_CASE_BODY_TIMEOUT_S": "3",
}
BODY_TIMEOUT_S = 3
BODY: dict[str, Any] = {"title": "Unlicensed trading", "summary": "Stall without licence",
                        "severity": 4, "evidence_count": 2, "reporter_email": "r@example.org"}


service = live_service_fixture("case-api-live", LIMITS)


@pytest.fixture
def http(service: LiveService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=15) as client:
        yield client


def officer(tenant: str | None = None, **kw: Any) -> dict[str, str]:
    """A fresh client (and by default a fresh tenant): rate-limit buckets of its own."""
    tenant = tenant or f"t-{uuid.uuid4().hex[:8]}"
    return bearer_headers(tenant, subject=kw.pop("subject", f"o-{uuid.uuid4().hex[:6]}"), **kw)


def open_case(http: httpx.Client, headers: dict[str, str]) -> str:
    response = http.post("/cases", json=BODY, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def assert_problem(response: httpx.Response, status: int, code: str,
                   field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == status
    assert body["type"] == f"urn:casestream:problem:{code}" and body["title"] and body["detail"]
    if field is not None:
        assert field in [e["field"] for e in body["errors"]], body
    for leak in ("Traceback", "psycopg", "SELECT ", "INSERT ", "postgres"):
        assert leak not in response.text
    return body


def outbox_count(service: LiveService, case_id: str) -> int:
    with psycopg.connect(service.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM outbox WHERE aggregateid = %s",
                           (case_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_authentication_and_roles(http: httpx.Client) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    missing = http.post("/cases", json=BODY, headers={"X-Tenant-Id": tenant})
    assert_problem(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == 'Bearer realm="casestream"'
    s = AuthSettings()
    expired = mint_token(tenant=tenant, roles=["officer"], subject="o", key=s.jwt_key,
                         issuer=s.jwt_issuer, audience=s.jwt_audience,
                         now=time.time() - 7200, ttl_s=60)
    bad = http.post("/cases", json=BODY, headers={"Authorization": f"Bearer {expired}"})
    assert_problem(bad, 401, "invalid_token")
    assert 'error="invalid_token"' in bad.headers["www-authenticate"]
    forged = mint_token(tenant=tenant, roles=["officer"], subject="o", key="f" * 40,
                        issuer=s.jwt_issuer, audience=s.jwt_audience)
    assert_problem(http.get(f"/cases/{uuid.uuid4()}",
                            headers={"Authorization": f"Bearer {forged}"}), 401, "invalid_token")

    case_id = open_case(http, officer(tenant))
    supervisor = officer(tenant, roles=("supervisor",))
    assert_reads_but_cannot_write(http, case_id, supervisor, BODY, assert_problem)
    assert http.get("/openapi.json").status_code == 200  # public
    assert http.get("/readyz").status_code == 200  # public


def test_another_tenants_case_is_404_on_every_route(http: httpx.Client,
                                                    service: LiveService) -> None:
    owner, intruder = officer(), officer()
    case_id = open_case(http, owner)
    read = http.get(f"/cases/{case_id}", headers=intruder)
    assert_problem(read, 404, "case_not_found")
    nowhere = http.get(f"/cases/{uuid.uuid4()}", headers=intruder)
    assert read.json()["title"] == nowhere.json()["title"]  # indistinguishable
    for extra in ({}, {"If-Match": '"1"'}, {"If-Match": "*"}):
        submit = http.post(f"/cases/{case_id}/submit", json={},
                           headers={**intruder, "Idempotency-Key": f"k-{case_id}", **extra})
        assert_problem(submit, 404, "case_not_found")
    assert outbox_count(service, case_id) == 1  # only CaseOpened
    ok = http.post(f"/cases/{case_id}/submit", json={},
                   headers={**owner, "Idempotency-Key": f"k-{case_id}"})
    assert ok.status_code == 200 and "idempotent-replayed" not in ok.headers
    assert http.get(f"/cases/{case_id}", headers=intruder).status_code == 404


MALFORMED: list[tuple[str, dict[str, Any], int, str, str | None]] = [
    # (what, request kwargs, status, code, field)
    ("title missing", {"json": {k: v for k, v in BODY.items() if k != "title"}}, 400,
     "validation_error", "title"),
    ("title blank", {"json": {**BODY, "title": " \t "}}, 400, "validation_error", "title"),
    ("title too long", {"json": {**BODY, "title": "t" * 201}}, 400, "validation_error", "title"),
    ("summary with NUL", {"json": {**BODY, "summary": "a\u0000b"}}, 400, "invalid_unicode",
     "summary"),
    ("severity as string", {"json": {**BODY, "severity": "4"}}, 400, "validation_error",
     "severity"),
    ("severity out of range", {"json": {**BODY, "severity": 9}}, 400, "validation_error",
     "severity"),
    ("severity boolean", {"json": {**BODY, "severity": True}}, 400, "validation_error",
     "severity"),
    ("evidence negative", {"json": {**BODY, "evidence_count": -1}}, 400, "validation_error",
     "evidence_count"),
    ("evidence beyond Avro int", {"json": {**BODY, "evidence_count": 2**31}}, 400,
     "validation_error", "evidence_count"),
    ("e-mail without domain", {"json": {**BODY, "reporter_email": "nobody@"}}, 400,
     "validation_error", "reporter_email"),
    ("priority unknown", {"json": {**BODY, "priority": "URGENT"}}, 400, "validation_error",
     "priority"),
    ("unknown field", {"json": {**BODY, "colour": "red"}}, 400, "validation_error", "colour"),
    ("not an object", {"json": [BODY]}, 400, "validation_error", "body"),
    ("truncated JSON", {"content": b'{"title": "x",', "headers": {
        "Content-Type": "application/json"}}, 400, "malformed_json", "body"),
    ("NaN", {"content": b'{"severity": NaN}', "headers": {"Content-Type": "application/json"}},
     400, "malformed_json", "body"),
    ("nested too deep", {"content": b'{"title": ' + b"[" * 1500 + b"]" * 1500 + b"}",
                         "headers": {"Content-Type": "application/json"}}, 400, "json_too_deep",
     "body"),
    ("empty body", {}, 400, "validation_error", "body"),
    ("lone surrogate", {"content": b'{"title": "\\ud800", "summary": "s", "severity": 1, '
                                   b'"evidence_count": 0, "reporter_email": "a@b.cd"}',
                        "headers": {"Content-Type": "application/json"}}, 400,
     "invalid_unicode", "title"),
    ("duplicate key", {"content": b'{"title": "a", "title": "b"}',
                       "headers": {"Content-Type": "application/json"}}, 400,
     "duplicate_json_key", "body"),
    ("empty Idempotency-Key", {"json": BODY, "headers": {"Idempotency-Key": ""}}, 400,
     "validation_error", "Idempotency-Key"),
]


@pytest.mark.parametrize(("what", "kwargs", "status", "code", "field"), MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_malformed_input_is_a_problem_naming_the_field(
        http: httpx.Client, what: str, kwargs: dict[str, Any], status: int, code: str,
        field: str | None) -> None:
    headers = {**officer(), **kwargs.pop("headers", {})}
    assert_problem(http.post("/cases", headers=headers, **kwargs), status, code, field)


def test_integral_floats_are_integers_as_in_json_schema(http: httpx.Client) -> None:
    response = http.post("/cases", json={**BODY, "severity": 3.0, "evidence_count": 0.0},
                         headers=officer())
    assert response.status_code == 201 and response.json()["severity"] == 3


def test_413_415_412(http: httpx.Client, service: LiveService) -> None:
    headers = officer()
    big = http.post("/cases", json={**BODY, "summary": "x" * 5000}, headers=headers)
    assert_problem(big, 413, "payload_too_large")
    chunked = http.post("/cases", content=iter([b'{"title": "', b"x" * 5000, b'"}']),
                        headers={**headers, "Content-Type": "application/json"})
    assert_problem(chunked, 413, "payload_too_large")  # no Content-Length: counted as it streams
    form = http.post("/cases", content=b"title=x",
                     headers={**headers, "Content-Type": "application/x-www-form-urlencoded"})
    assert_problem(form, 415, "unsupported_media_type")
    case_id = open_case(http, headers)
    url = f"/cases/{case_id}/submit"
    for stale in ('"2"', 'W/"1"', "yesterday"):
        assert_problem(http.post(url, json={}, headers={**headers, "Idempotency-Key": "k1",
                                                        "If-Match": stale}),
                       412, "precondition_failed")
    assert outbox_count(service, case_id) == 1
    fresh = http.post(url, json={}, headers={**headers, "Idempotency-Key": "k1",
                                             "If-Match": '"1"'})
    assert fresh.status_code == 200 and fresh.headers["etag"] == '"2"'


def test_rate_limit_per_client_and_per_tenant(http: httpx.Client) -> None:
    client = officer()
    statuses = [http.get(f"/cases/{uuid.uuid4()}", headers=client) for _ in range(25)]
    assert [r.status_code for r in statuses[:20]] == [404] * 20  # the burst of 20 is served
    limited = statuses[-1]
    body = assert_problem(limited, 429, "rate_limited")
    assert limited.headers["retry-after"] == "1"
    assert body["retry_after_seconds"] == 1 and body["limit_scope"] == "client"

    tenant = f"t-{uuid.uuid4().hex[:8]}"  # 3 clients x 20 > the tenant's 50
    answers = [http.get(f"/cases/{uuid.uuid4()}", headers=c).status_code
               for c in (officer(tenant) for _ in range(3)) for _ in range(20)]
    assert answers.count(404) <= 52 and answers.count(429) >= 8
    last = http.get(f"/cases/{uuid.uuid4()}", headers=officer(tenant))
    assert_problem(last, 429, "rate_limited")
    assert last.json()["limit_scope"] == "tenant" and int(last.headers["retry-after"]) >= 1
    assert http.get(f"/cases/{uuid.uuid4()}", headers=officer()).status_code == 404  # others fine


def test_burst_beyond_in_flight_limit_is_503_and_deadlines_bound_the_rest(
        http: httpx.Client, service: LiveService) -> None:
    """With the cases table locked, MAX_IN_FLIGHT reads hang in the database; the rest of a
    burst is refused at once (503 overloaded); the hung ones end at the request deadline
    (503, not a timeout); once the lock is gone everything is served again."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    case_id = open_case(http, officer(tenant))
    url = f"{service.url}/cases/{case_id}"

    def get(timeout: float = 15) -> tuple[int, float, str]:
        started = time.monotonic()
        r = httpx.get(url, headers=officer(tenant), timeout=timeout)
        code = r.json().get("code", "") if r.status_code >= 400 else ""
        return r.status_code, time.monotonic() - started, code

    with psycopg.connect(service.dsn) as locker:
        locker.execute("LOCK TABLE cases IN ACCESS EXCLUSIVE MODE")
        with ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT) as pool:
            held = [pool.submit(get) for _ in range(MAX_IN_FLIGHT)]
            waiting = 0
            for _ in range(100):  # until the held requests wait on the lock
                with psycopg.connect(service.dsn, autocommit=True) as probe:
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'case' "
                        "AND wait_event_type = 'Lock'").fetchone()
                waiting = int(row[0]) if row else 0
                if waiting == MAX_IN_FLIGHT:
                    break
                time.sleep(0.02)
            assert waiting == MAX_IN_FLIGHT
            with ThreadPoolExecutor(max_workers=8) as burst_pool:
                burst = list(burst_pool.map(lambda _: get(), range(8)))
            assert [b[0] for b in burst] == [503] * 8
            assert {b[2] for b in burst} == {"overloaded"}
            # refused at once: a queued request would wait at least the request deadline
            assert max(b[1] for b in burst) < DEADLINE_S
            results = [h.result() for h in held]
        locker.rollback()
    for status, elapsed, code in results:
        assert status == 503 and code == "service_unavailable", results
        assert DEADLINE_S - 0.5 < elapsed < DEADLINE_S + 2.5, results  # ends at the deadline
    after = httpx.get(url, headers=officer(tenant), timeout=5)
    assert after.status_code == 200
    assert "unhandled error" not in service.log.read_text(errors="replace")


@pytest.mark.parametrize(("env", "message"), [
    ({"CASESTREAM_AUTO_REGISTER_SCHEMAS": "false"}, "public development key"),
    ({"CASESTREAM_AUTH_JWT_KEY": "too-short"}, "too weak"),
    ({"CASESTREAM_AUTH_JWT_ALGORITHM": "ES256", "CASESTREAM_AUTH_JWT_KEY": "not a pem"},
     "not a usable ES256"),
])
def test_refuses_to_start_with_an_unsafe_key(env: dict[str, str], message: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CASESTREAM_AUTH_")}
    run = subprocess.run([sys.executable, "-m", "services.case"], cwd=REPO,
                         env={**clean, **env}, capture_output=True, text=True, timeout=60,
                         check=False)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "start-up failed" in run.stderr and message in run.stderr
    assert "Traceback" not in run.stderr


def _slow_body(port: int, headers: dict[str, str]) -> socket.socket:
    """A connection that sent a POST /cases request's headers and one byte of its body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    lines = ["POST /cases HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             "Content-Length: 200", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n{").encode())
    return sock


def _slow_headers(port: int) -> socket.socket:
    """A connection that sent a few bytes of a request line and nothing more."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"GET /cases/x HT")
    return sock


def test_slow_clients_do_not_starve_a_normal_client(http: httpx.Client,
                                                    service: LiveService) -> None:
    """40 bodies trickling (10 x the in-flight limit) and 20 half-sent request lines hold
    connections; a normal client is served meanwhile, each slow body ends with 408 after the
    body read timeout, and clients hanging up (before or after their answer) log no error."""
    port = int(service.url.rsplit(":", 1)[1])
    headers = officer()
    slow = [_slow_body(port, headers) for _ in range(40)]
    trickling = [_slow_headers(port) for _ in range(20)]
    try:
        time.sleep(0.5)  # every slow body is now being read by the edge
        opened = [http.post("/cases", json=BODY, headers=headers).status_code for _ in range(5)]
        assert opened == [201] * 5 and http.get("/readyz").status_code == 200
        answers = set()
        for sock in slow:  # each slow body ends with the edge's 408, never holding a slot
            sock.settimeout(BODY_TIMEOUT_S + 10)
            answers.add(sock.recv(200).split(b"\r\n", 1)[0])
        assert answers == {b"HTTP/1.1 408 Request Timeout"}
        hanging_up = [_slow_body(port, headers) for _ in range(10)]
        time.sleep(0.3)
        for sock in hanging_up:  # gone while the edge still reads their bodies
            sock.close()
    finally:
        for sock in slow + trickling:
            sock.close()
    time.sleep(0.5)
    assert http.get("/readyz").status_code == 200
    log = service.log.read_text(errors="replace")
    assert "unhandled error" not in log and "Traceback" not in log, service.log_tail()


def test_in_flight_slots_are_all_free_again(http: httpx.Client) -> None:
    """After the overload test every in-flight slot was given back: a full set is served."""
    headers = officer()
    case_id = open_case(http, headers)
    answers = []
    lock = threading.Lock()

    def read() -> None:
        r = http.get(f"/cases/{case_id}", headers=headers)
        with lock:
            answers.append(r.status_code)

    threads = [threading.Thread(target=read) for _ in range(MAX_IN_FLIGHT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * MAX_IN_FLIGHT
