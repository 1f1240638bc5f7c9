"""End-to-end: the five services as processes on the real Kafka, PostgreSQL, registry and SMTP sink.

Asserts what a regulator relies on: every submitted case reaches a final state, every
audit timeline is complete and in aggregate-version order, each violating case got
exactly one SMTP notice, a resubmission with the same Idempotency-Key changes nothing,
and killing a service mid-flow loses and doubles nothing.
"""

from __future__ import annotations

import email
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from services.demo import (
    FINAL_CASE_STATES,
    CaseRun,
    audit_url,
    case_mix,
    case_status,
    case_url,
    check_trail,
    headers,
    open_and_submit,
    wait_final,
)
from casestream.service.devstack import ServiceStack


@pytest.fixture(scope="module")
def stack(suite_stack: ServiceStack) -> ServiceStack:
    """The shared suite stack (tests/e2e/conftest.py): every test drives its own new cases,
    so they share it; the kill tests restart their victim, and the next test finds all five
    running."""
    return suite_stack


def notices_by_case(maildir: Path, runs: list[CaseRun]) -> Counter[str]:
    """How many SMTP messages with distinct Message-IDs mention each case id (headers or body).

    A notice is mailed again with the same Message-ID when its sender is killed between the
    SMTP server's ``250`` and its commit (the window ``services.notification.application.sender``
    describes); a de-duplicating reader sees one message, and so does this count."""
    ids = {run.case_id for run in runs}
    by_case: dict[str, set[str]] = {}
    for path in maildir.glob("*.eml"):
        message = email.message_from_bytes(path.read_bytes())
        text = str(message)
        message_id = message.get("Message-ID") or path.name
        for case_id in ids:
            if case_id in text:
                by_case.setdefault(case_id, set()).add(message_id)
    return Counter({case_id: len(mids) for case_id, mids in by_case.items()})


def assert_journeys(runs: list[CaseRun], maildir: Path) -> None:
    not_final = [(r.case_id, r.status) for r in runs if r.status not in FINAL_CASE_STATES]
    assert not not_final, f"cases not final: {not_final}"
    for run in runs:
        assert check_trail(run) == [], (run.case_id, run.trail)
        expected_status = "returned" if run.spec.expected == "decision_failed" else "closed"
        assert run.status == expected_status, (run.case_id, run.spec.expected, run.status)
    notices = notices_by_case(maildir, runs)
    for run in runs:
        wanted = 1 if run.spec.expected == "violation" else 0
        assert notices[run.case_id] == wanted, (run.case_id, run.spec.expected, notices[run.case_id])


def test_cases_reach_final_states_with_complete_trails_and_one_notice(
    stack: ServiceStack, smtp_maildir: Path
) -> None:
    with httpx.Client(timeout=10.0) as client:
        runs = [open_and_submit(client, spec) for spec in case_mix(20)]
        wait_final(client, runs, timeout_s=180)

        timeline = client.get(
            audit_url(f"/audit/cases/{runs[5].case_id}"), headers=headers("tenant-a")
        ).json()["events"]
        case_versions = [e["aggregate_version"] for e in timeline if e["aggregate_type"] == "case"]
        assert case_versions == sorted(case_versions) and len(case_versions) >= 3

    assert_journeys(runs, smtp_maildir)


def test_resubmission_with_the_same_key_starts_no_second_saga(
    stack: ServiceStack, smtp_maildir: Path
) -> None:
    spec = case_mix(3, failures=0)[0]  # a violation: the notice count shows a second saga
    with httpx.Client(timeout=10.0) as client:
        opened = client.post(case_url("/cases"), json=spec.body(), headers=headers(spec.tenant))
        case_id = opened.json()["id"]
        key = {"Idempotency-Key": str(uuid.uuid4())}
        first = client.post(case_url(f"/cases/{case_id}/submit"), json={},
                            headers=headers(spec.tenant, **key))
        again = client.post(case_url(f"/cases/{case_id}/submit"), json={},
                            headers=headers(spec.tenant, **key))
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json()
        run = CaseRun(spec, case_id)
        wait_final(client, [run], timeout_s=120)
        late = client.post(case_url(f"/cases/{case_id}/submit"), json={},
                           headers=headers(spec.tenant, **{"Idempotency-Key": str(uuid.uuid4())}))
        assert late.status_code == 409
    assert run.trail.count("CaseSubmitted") == 1
    assert run.trail.count("DecisionRequested") == 1
    assert_journeys([run], smtp_maildir)


@pytest.mark.parametrize("victim", ["saga", "notification", "audit", "case", "decision"])
def test_killing_a_service_mid_flow_loses_and_doubles_nothing(
    stack: ServiceStack, smtp_maildir: Path, victim: str
) -> None:
    with httpx.Client(timeout=10.0) as client:
        runs = [open_and_submit(client, spec) for spec in case_mix(10)]
        # A journey takes well under a second now: only the newest one, read just before the
        # kill, is surely still under way (its audit entries too).
        newest_in_flight = case_status(client, runs[-1]) not in FINAL_CASE_STATES
        stack.kill(victim)
        try:
            assert newest_in_flight, "every journey had finished before the kill: not a mid-flow kill"
            time.sleep(1.0)
        finally:  # the stack is shared: the next test needs the victim back either way
            stack.start(victim)
            stack.wait_ready([victim])
        wait_final(client, runs, timeout_s=180)
    assert_journeys(runs, smtp_maildir)
