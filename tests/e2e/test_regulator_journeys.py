"""End-to-end: the regulator's journeys through the five services on the real Kafka,
PostgreSQL, registry and SMTP sink (one suite start for every assertion).

Each path of ``services.journeys`` (no violation, violation with a PDF notice, decision
failure returned, withdrawal, appeal upheld -> correction notice, appeal rejected -> party
told, evidence overdue -> reminder -> manual review): the case ends in its status and its
audit timeline holds the path's events in order; each violating case sent exactly one notice
to its party, with a PDF attached whose SHA-256 the notice record (NoticeIssued v2) carries,
and an upheld appeal exactly one correction notice (its own PDF and hash, the first notice
kept); the overdue evidence's party gets exactly one reminder mail and the audit trail
holds its EvidenceReminderSent (caused by the EvidenceOverdue); the appeal saga is linked to
the first by its record and by causation; the dashboard
shows officer, evidence status, penalty and appeal state; the officer workload counts open
cases and overdue evidence, and ``casestream replay case.workload`` rebuilds it identically.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from casestream.service.devstack import ServiceStack
from services.journeys import JOURNEYS, JourneyRun, drive, wait_journeys

TENANT = f"tenant-journeys-{uuid.uuid4().hex[:8]}"
"""This run's tenant: the workload counts of earlier runs stay apart."""


@pytest.fixture(scope="module")
def stack(suite_stack: ServiceStack) -> ServiceStack:
    """The shared suite stack (tests/e2e/conftest.py), which runs with ``DEMO_CASE_SETTINGS``;
    the journeys' cases and workload counts are this run's tenant's."""
    return suite_stack


@pytest.fixture(scope="module")
def runs(stack: ServiceStack) -> dict[str, JourneyRun]:
    with httpx.Client(timeout=10.0) as client:
        driven = [drive(client, j, tenant=TENANT) for j in JOURNEYS]
        wait_journeys(client, driven, timeout_s=150)
    return {r.journey.name: r for r in driven}


def _eventually(check: Callable[[], None], timeout_s: float = 20.0) -> None:
    """Run ``check`` until it passes (the projections may trail the audit journal)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def _db(pg_url: str, name: str) -> psycopg.Connection:
    return psycopg.connect(make_conninfo(pg_url, dbname=name), autocommit=True)


def _notices(maildir: Path, case_id: str, kind: str = "notice") -> list[email.message.EmailMessage]:
    out = []
    for path in maildir.glob("*.eml"):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        if (message.get("X-Casestream-Case-Id") == case_id
                and message.get("X-Casestream-Notice-Kind", "notice") == kind):
            out.append(message)
    return out


def _pdf_hash(mail: email.message.EmailMessage) -> str:
    [pdf] = [p for p in mail.iter_attachments() if p.get_content_type() == "application/pdf"]
    content = pdf.get_content()
    assert content.startswith(b"%PDF-")
    return hashlib.sha256(content).hexdigest()


def test_every_journey_ends_in_its_status_with_its_events_in_order(
        runs: dict[str, JourneyRun]) -> None:
    for run in runs.values():
        assert run.problems() == [], (run.journey.name, run.case_id, run.status, run.trail)
    assert set(runs) == {j.name for j in JOURNEYS}


def test_one_notice_per_violating_party_with_the_pdf_whose_hash_the_notice_records(
        runs: dict[str, JourneyRun], smtp_maildir: Path, pg_url: str) -> None:
    with _db(pg_url, "notification") as conn:
        for run in runs.values():
            mails = _notices(smtp_maildir, run.case_id)
            assert len(mails) == run.journey.notices, (run.journey.name, len(mails))
            if not mails:
                continue
            [mail] = mails
            assert mail["To"] == "party@example.org"
            stored = conn.execute("SELECT document_sha256 FROM notice WHERE case_id = %s "
                                  "AND kind = 'notice'", (run.case_id,)).fetchone()
            assert stored == (_pdf_hash(mail),)


def test_upheld_appeal_sends_one_correction_and_keeps_the_first_notice(
        runs: dict[str, JourneyRun], smtp_maildir: Path, pg_url: str) -> None:
    with _db(pg_url, "notification") as conn:
        for run in runs.values():
            corrections = _notices(smtp_maildir, run.case_id, "correction")
            assert len(corrections) == run.journey.corrections, (run.journey.name, len(corrections))
            rejections = _notices(smtp_maildir, run.case_id, "appeal_rejection")
            assert len(rejections) == (run.journey.name == "appeal_rejected"), run.journey.name
            kinds = dict(conn.execute("SELECT kind, status FROM notice WHERE case_id = %s",
                                      (run.case_id,)).fetchall())
            if run.journey.corrections:
                [mail] = corrections
                assert kinds == {"notice": "sent", "correction": "sent"}
                stored = conn.execute("SELECT document_sha256 FROM notice WHERE case_id = %s "
                                      "AND kind = 'correction'", (run.case_id,)).fetchone()
                assert stored == (_pdf_hash(mail),)
    upheld = runs["appeal_upheld"]
    with _db(pg_url, "audit") as conn:
        rows = conn.execute(
            "SELECT event_id::text, event_type, causation_id::text, aggregate_id, payload "
            "FROM audit_journal WHERE tenant_id = %s AND case_id = %s ORDER BY occurred_at",
            (upheld.tenant, upheld.case_id)).fetchall()
    events = [{"event_id": r[0], "event_type": r[1], "causation_id": r[2], "aggregate_id": r[3],
               "payload": r[4]} for r in rows]
    by_type = {e["event_type"]: e for e in events}
    by_id = {e["event_id"]: e for e in events}
    # both notices stay in the audit trail; the correction's hash is the one mailed
    assert [e["event_type"] for e in events].count("NoticeIssued") == 1
    issued = by_type["CorrectionNoticeIssued"]
    [mail] = _notices(smtp_maildir, upheld.case_id, "correction")
    assert issued["payload"]["document_sha256"] == _pdf_hash(mail)
    # the correction's causation chain leads back to the AppealSubmitted
    chain, cursor = [], issued
    while cursor is not None:
        chain.append(cursor["event_type"])
        cursor = by_id.get(cursor.get("causation_id") or "")
    assert chain == ["CorrectionNoticeIssued", "CorrectionNoticeRequested", "AppealUpheld",
                     "AppealDecisionRequested", "AppealSubmitted"]
    # the appeal saga is a second saga of the case, and its record names the first
    appeal_saga = by_type["AppealDecisionRequested"]["aggregate_id"]
    review_saga = by_type["DecisionRequested"]["aggregate_id"]
    assert appeal_saga != review_saga
    with _db(pg_url, "saga") as conn:
        row = conn.execute("SELECT definition, state, data->>'original_saga_id' FROM saga "
                           "WHERE saga_id = %s::uuid", (appeal_saga,)).fetchone()
    assert row == ("appeal", "COMPLETED", review_saga)


def test_overdue_evidence_reminds_its_party_once_and_the_trail_shows_the_reminder(
        runs: dict[str, JourneyRun], smtp_maildir: Path, pg_url: str) -> None:
    overdue = runs["evidence_overdue"]
    for run in runs.values():
        if run is not overdue:
            assert _notices(smtp_maildir, run.case_id, "evidence_reminder") == [], run.journey.name

    def reminded() -> None:
        [mail] = _notices(smtp_maildir, overdue.case_id, "evidence_reminder")
        assert mail["To"] == "party@example.org" and "overdue" in mail["Subject"]
        with _db(pg_url, "audit") as conn:
            rows = conn.execute(
                "SELECT event_id::text, event_type, causation_id::text, payload FROM audit_journal "
                "WHERE tenant_id = %s AND case_id = %s ORDER BY occurred_at",
                (overdue.tenant, overdue.case_id)).fetchall()
        [reminder] = [r for r in rows if r[1] == "EvidenceReminderSent"]
        [reminded_of] = [r for r in rows if r[1] == "EvidenceOverdue"]
        assert reminder[2] == reminded_of[0]  # caused by the EvidenceOverdue
        assert reminder[3]["message_id"] == mail["Message-ID"]
        assert reminder[3]["request_id"] == reminded_of[3]["request_id"]
        with _db(pg_url, "notification") as conn:
            assert conn.execute("SELECT status FROM notice WHERE case_id = %s AND kind = "
                                "'evidence_reminder'", (overdue.case_id,)).fetchall() == [("sent",)]

    _eventually(reminded, timeout_s=15.0)


def test_dashboard_and_officer_workload_follow_the_journeys(
        runs: dict[str, JourneyRun], infra_env: dict[str, str], pg_url: str) -> None:
    from services.case.adapters.dashboard import case_row
    from services.case.adapters.workload import workload

    appealed, violation, withdrawn = runs["appeal_upheld"], runs["violation"], runs["withdrawn"]
    rejected = runs["appeal_rejected"]
    pending, overdue = runs["evidence_pending"], runs["evidence_overdue"]
    query = ("SELECT case_id, officer_id, open, evidence_status, evidence_due_at, last_version "
             "FROM officer_workload ORDER BY case_id")
    with _db(pg_url, "case") as conn:
        def dashboard() -> None:
            assert case_row(conn, violation.case_id) == (
                "closed", violation.officer, "submitted", "violation", 200_000, None)
            assert case_row(conn, appealed.case_id) == (
                "closed", appealed.officer, "submitted", "no_violation", None, "decided")
            assert case_row(conn, rejected.case_id) == (
                "closed", rejected.officer, "submitted", "violation", 150_000, "decided")
            assert case_row(conn, withdrawn.case_id)[:3] == ("withdrawn", withdrawn.officer,
                                                             "requested")
            assert case_row(conn, overdue.case_id)[:3] == ("manual_review", overdue.officer,
                                                           "overdue")

        def officers() -> None:
            later = datetime.now(UTC) + timedelta(days=30)  # every request is overdue then
            mine = {officer: (open_cases, late) for tenant, officer, open_cases, late
                    in workload(conn, later) if tenant == TENANT}
            now = {officer: late for tenant, officer, _, late
                   in workload(conn, datetime.now(UTC)) if tenant == TENANT}
            assert mine[appealed.officer] == (0, 0)  # the appeal closed again; evidence arrived
            assert mine[violation.officer] == (0, 0) and mine[withdrawn.officer] == (0, 0)
            assert mine[pending.officer] == (1, 1)  # still awaiting: overdue once its date passed
            assert now[pending.officer] == 0 and now[appealed.officer] == 0
            assert mine[overdue.officer] == (1, 1) and now[overdue.officer] == 1

        _eventually(dashboard)
        _eventually(officers)
        before = conn.execute(query).fetchall()

    replay = subprocess.run([sys.executable, "-m", "casestream", "replay", "case.workload",
                             "--workers", "1"], env=infra_env, capture_output=True, text=True,
                            timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    with _db(pg_url, "case") as conn:
        after = conn.execute(query).fetchall()
    ours = {r.case_id for r in runs.values()}
    assert [r for r in after if r[0] in ours] == [r for r in before if r[0] in ours]
    assert len([r for r in after if r[0] in ours]) == len(runs)
