"""``casestream reconcile`` against real PostgreSQL (fresh databases) and the schema registry.

Drift is planted directly in the case and saga databases (as a crash, a lost message or a
restored backup would leave it); the job must report it, repair what it can, and be a
no-op when run again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner

from tests.support.databases import created_databases

from casestream.events.catalog import load_catalog
from services.saga.adapters.cli_reconcile import SERVICES, reconcile, run_reconcile
from casestream.events.codec import EnvelopeCodec
from casestream.migrations import apply_migrations
from casestream.events.envelope import new_event
from casestream.outbox.writer import OUTBOX_MIGRATION, OutboxWriter
from casestream.events.registry import ConfluentSchemaRegistry
from casestream_suite_schemas.upcasters import default_upcasters
from services.case.bootstrap import migrations as case_migrations
from services.saga.bootstrap import migrations as saga_migrations
from services import schemas_dir
from casestream.events import open_codec

TENANT = "tenant-rec"
LATER = datetime.now(UTC) + timedelta(hours=1)  # "now" of the job: every planted row is old


@pytest.fixture(scope="module")
def dbs(pg_url: str) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    names = {s: f"{s}_rec_{suffix}" for s in SERVICES}
    with created_databases(f"{pg_url}/postgres", names.values()):
        apply_migrations(f"{pg_url}/{names['case']}", case_migrations())
        apply_migrations(f"{pg_url}/{names['saga']}", saga_migrations())
        apply_migrations(f"{pg_url}/{names['decision']}", [OUTBOX_MIGRATION])
        yield names


@pytest.fixture(scope="module")
def codec(registry_url: str) -> Iterator[EnvelopeCodec]:
    registry = ConfluentSchemaRegistry(registry_url)
    c = open_codec(load_catalog(schemas_dir()), registry, auto_register=None)
    try:
        c.prepare(auto_register=True)
        yield c
    finally:
        registry.close()


def plant_submitted_case(pg_url: str, dbs: dict[str, str], codec: EnvelopeCodec) -> str:
    """A submitted case whose CaseSubmitted is in the case outbox (the saga never saw it)."""
    case_id = str(uuid.uuid4())
    submitted = new_event(event_type="CaseSubmitted", aggregate_type="case", aggregate_id=case_id,
                          aggregate_version=2, tenant_id=TENANT, source="case", actor_id="o-1",
                          correlation_id=case_id,
                          payload={"title": "Drifted", "severity": 4, "evidence_count": 1,
                                   "reporter_email": "r@example.org", "submitted_by": "o-1"})
    with psycopg.connect(f"{pg_url}/{dbs['case']}") as conn:
        conn.execute(
            """INSERT INTO cases (id, tenant_id, status, version, title, summary, severity,
                                  evidence_count, reporter_email, priority, opened_by, opened_at,
                                  updated_at, submitted_by, submitted_at)
               VALUES (%s, %s, 'submitted', 2, 'Drifted', 's', 4, 1, 'r@example.org', 'NORMAL',
                       'o-1', now(), now(), 'o-1', now())""", (case_id, TENANT))
        OutboxWriter(codec).append(conn, [submitted])
        conn.execute("UPDATE outbox SET status = 'published', published_at = now() "
                     "WHERE aggregateid = %s", (case_id,))
    return case_id


def saga_rows(pg_url: str, dbs: dict[str, str], case_id: str) -> list[tuple[str, str]]:
    with psycopg.connect(f"{pg_url}/{dbs['saga']}") as conn:
        return conn.execute("SELECT saga_id::text, state FROM saga WHERE case_id = %s",
                            (case_id,)).fetchall()


def saga_outbox(pg_url: str, dbs: dict[str, str], saga_id: str) -> list[str]:
    with psycopg.connect(f"{pg_url}/{dbs['saga']}") as conn:
        return [r[0] for r in conn.execute(
            "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY seq", (saga_id,))]


def test_submitted_case_without_saga_is_reported_then_repaired_once(
        pg_url: str, registry_url: str, dbs: dict[str, str], codec: EnvelopeCodec) -> None:
    case_id = plant_submitted_case(pg_url, dbs, codec)
    kw = dict(pg_url=pg_url, databases=dbs, threshold=timedelta(seconds=60),
              registry_url=registry_url, now=LATER)
    found = [f for f in run_reconcile(repair=False, **kw) if f.subject == case_id]
    assert [(f.kind, f.repaired) for f in found] == [("submitted-without-saga", False)]
    assert saga_rows(pg_url, dbs, case_id) == []
    # nothing is reported for a case submitted less than the threshold ago
    assert not [f for f in run_reconcile(repair=False, **{**kw, "now": datetime.now(UTC)})
                if f.subject == case_id]

    repaired = [f for f in run_reconcile(repair=True, **kw) if f.subject == case_id]
    assert [(f.kind, f.repaired) for f in repaired] == [("submitted-without-saga", True)]
    [(saga_id, state)] = saga_rows(pg_url, dbs, case_id)
    assert state == "AWAITING_DECISION"
    assert saga_outbox(pg_url, dbs, saga_id) == ["DecisionRequested"]

    again = [f for f in run_reconcile(repair=True, **kw) if f.subject in (case_id, saga_id)]
    assert again == []  # idempotent: the saga exists now
    assert len(saga_rows(pg_url, dbs, case_id)) == 1


def test_completed_saga_whose_case_is_open_gets_one_close_request(
        pg_url: str, registry_url: str, dbs: dict[str, str], codec: EnvelopeCodec) -> None:
    case_id = plant_submitted_case(pg_url, dbs, codec)
    kw = dict(pg_url=pg_url, databases=dbs, threshold=timedelta(seconds=60),
              registry_url=registry_url, now=LATER)
    run_reconcile(repair=True, **kw)  # start its saga
    [(saga_id, _)] = saga_rows(pg_url, dbs, case_id)
    with psycopg.connect(f"{pg_url}/{dbs['saga']}") as conn:  # drift: saga done, case open
        conn.execute("""UPDATE saga SET state = 'COMPLETED', step = NULL, attempts = 0,
                        deadline_at = NULL, active = false,
                        data = data || '{"outcome": "no_violation", "penalty_cents": null}'
                        WHERE saga_id = %s::uuid""", (saga_id,))

    found = [f for f in run_reconcile(repair=False, **kw) if f.subject == saga_id]
    assert [(f.kind, f.repaired) for f in found] == [("completed-saga-case-open", False)]
    assert "case " + case_id + " is submitted" in found[0].detail

    fixed = [f for f in run_reconcile(repair=True, **kw) if f.subject == saga_id]
    assert fixed[0].repaired and "re-issued" in fixed[0].detail
    assert saga_outbox(pg_url, dbs, saga_id) == ["DecisionRequested", "CaseCloseRequested"]
    with psycopg.connect(f"{pg_url}/{dbs['saga']}") as conn:
        seq, version = conn.execute("SELECT event_seq, version FROM saga WHERE saga_id = %s::uuid",
                                    (saga_id,)).fetchone()
        versions = [r[0] for r in conn.execute(
            "SELECT aggregate_version FROM outbox WHERE aggregateid = %s ORDER BY seq",
            (saga_id,))]
    assert versions == [1, 2] and seq == 2

    # a second run inside the threshold does not pile up requests
    second = [f for f in run_reconcile(repair=True, **kw) if f.subject == saga_id]
    assert second[0].repaired and "recently" in second[0].detail
    assert saga_outbox(pg_url, dbs, saga_id) == ["DecisionRequested", "CaseCloseRequested"]

    with psycopg.connect(f"{pg_url}/{dbs['case']}") as conn:  # the case service closes it
        conn.execute("UPDATE cases SET status = 'closed', outcome = 'no_violation' "
                     "WHERE id = %s", (case_id,))
    assert not [f for f in run_reconcile(repair=True, **kw) if f.subject == saga_id]


def test_outbox_rows_pending_too_long_are_reported_per_database_and_cli_exit_status(
        pg_url: str, registry_url: str, dbs: dict[str, str], codec: EnvelopeCodec) -> None:
    event = new_event(event_type="NoViolationFound", aggregate_type="decision",
                      aggregate_id=str(uuid.uuid4()), aggregate_version=1, tenant_id=TENANT,
                      source="decision", actor_id="decision", correlation_id="c",
                      payload={"case_id": "c", "saga_id": str(uuid.uuid4())})
    with psycopg.connect(f"{pg_url}/{dbs['decision']}") as conn:
        OutboxWriter(codec).append(conn, [event])
    found = [f for f in run_reconcile(pg_url=pg_url, databases=dbs, repair=False, now=LATER,
                                      threshold=timedelta(seconds=60))
             if f.kind == "outbox-pending"]
    by_db = {f.database: f.detail for f in found}
    assert "decision" in by_db and by_db["decision"].startswith("1 pending and 0 failed")

    env = {"CASESTREAM_PG_URL": pg_url, "CASESTREAM_REGISTRY_URL": registry_url,
           **{f"CASESTREAM_{s.upper()}_DATABASE": n for s, n in dbs.items()}}
    result = CliRunner().invoke(reconcile, ["--threshold-s", "0", "--json"], env=env)
    assert result.exit_code == 1, result.output  # drift left (the dry run repairs nothing)
    assert '"kind": "outbox-pending"' in result.output
    with psycopg.connect(f"{pg_url}/{dbs['decision']}") as conn:
        conn.execute("UPDATE outbox SET status = 'published', published_at = now()")
    result = CliRunner().invoke(reconcile, ["--threshold-s", "3600"], env=env)
    assert result.exit_code == 0, result.output
    assert "0 finding(s)" in result.output


def test_resubmitted_case_whose_only_saga_is_older_is_flagged(
        pg_url: str, registry_url: str, dbs: dict[str, str], codec: EnvelopeCodec) -> None:
    case_id = plant_submitted_case(pg_url, dbs, codec)
    kw = dict(pg_url=pg_url, databases=dbs, threshold=timedelta(seconds=60),
              registry_url=registry_url, now=LATER)
    run_reconcile(repair=True, **kw)
    [(saga_id, _)] = saga_rows(pg_url, dbs, case_id)
    assert not [f for f in run_reconcile(repair=False, **kw) if f.subject == case_id]
    with psycopg.connect(f"{pg_url}/{dbs['saga']}") as conn:  # that saga ended long ago
        conn.execute("""UPDATE saga SET state = 'COMPENSATED', active = false, step = NULL,
                        deadline_at = NULL, created_at = now() - interval '1 day'
                        WHERE saga_id = %s::uuid""", (saga_id,))
    with psycopg.connect(f"{pg_url}/{dbs['case']}") as conn:  # ... for a submission before it
        conn.execute("UPDATE cases SET submitted_at = now() - interval '2 days' WHERE id = %s",
                     (case_id,))
    assert not [f for f in run_reconcile(repair=False, **kw) if f.subject == case_id]
    with psycopg.connect(f"{pg_url}/{dbs['case']}") as conn:  # returned, then submitted again
        conn.execute("UPDATE cases SET submitted_at = now() WHERE id = %s", (case_id,))
    found = [f for f in run_reconcile(repair=False, **kw) if f.subject == case_id]
    assert [f.kind for f in found] == ["submitted-without-saga"]
