"""The audit service against a real PostgreSQL, driven through the consumer runtime's batch
processor (inbox, version guard; no Kafka) with the real Avro codec.

A case journey across the four topics lands once in the append-only journal (UPDATE,
DELETE and TRUNCATE are refused by triggers) and in the case timeline, which the HTTP
API serves tenant-scoped in order; the timeline rebuilds into a shadow table in REPLAY
mode and swaps in, leaving the journal untouched.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient
from test_case_support import pg_fixtures, record_of

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.events.codec import EnvelopeCodec
from casestream.consumer.batch import BatchProcessor
from casestream.consumer.records import Record
from casestream.consumer.settings import ConsumerSettings
from casestream.consumer.deadletters import MemoryDeadLetters
from casestream.events.envelope import Envelope, new_event
from casestream.http import EdgePolicy
from casestream.handlers.processing import ProcessingMode
from services.audit.adapters.handlers import CONSUMER, build_registry
from services.audit.adapters.http import build_app
from services.audit.adapters.postgres import PgTimelineReader
from services.audit.adapters.projection import (
    AuditTables,
    create_shadow_timeline,
    swap_in_timeline,
)
from services.audit.bootstrap import migrations

TENANT = "tenant-x"
T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


dsn, codec, pool = pg_fixtures("audit_it", migrations, inbox=True)


def ev(event_type: str, aggregate_type: str, aggregate_id: str, version: int, seconds: float,
       payload: dict[str, Any], *, case_id: str, event_version: int | None = None,
       tenant: str = TENANT) -> Envelope:
    source = {"notice": "notification"}.get(aggregate_type, aggregate_type)
    return new_event(event_type=event_type, aggregate_type=aggregate_type,
                     aggregate_id=aggregate_id, aggregate_version=version, payload=payload,
                     tenant_id=tenant, source=source, actor_id="someone", correlation_id=case_id,
                     event_version=event_version, occurred_at=T0 + timedelta(seconds=seconds))


def journey(case_id: str, *, tenant: str = TENANT) -> list[Envelope]:
    """A violating case's journey; CaseOpened written as v1 (upcast on decode)."""
    saga = str(uuid.uuid4())
    kw = {"case_id": case_id, "tenant": tenant}
    return [
        ev("CaseOpened", "case", case_id, 1, 0, {"title": "Unlicensed trading",
           "description": " Stall \n without   licence ", "severity": 4, "evidence_count": 2,
           "reporter_email": "r@example.org"}, event_version=1, **kw),
        ev("CaseSubmitted", "case", case_id, 2, 1, {"title": "Unlicensed trading", "severity": 4,
           "evidence_count": 2, "reporter_email": "r@example.org", "submitted_by": "officer"},
           **kw),
        ev("DecisionRequested", "saga", saga, 1, 2, {"case_id": case_id, "severity": 4,
           "evidence_count": 2}, **kw),
        ev("ViolationDetermined", "decision", case_id, 1, 3, {"case_id": case_id,
           "saga_id": saga, "violation_code": "V-LIC", "penalty_cents": 50_000}, **kw),
        ev("NoticeRequested", "saga", saga, 2, 4, {"case_id": case_id,
           "recipient_email": "r@example.org", "penalty_cents": 50_000,
           "violation_code": "V-LIC"}, **kw),
        ev("NoticeIssued", "notice", case_id, 1, 5, {"case_id": case_id, "saga_id": saga,
           "recipient_email": "r@example.org", "message_id": "<m1@x>"}, **kw),
        ev("CaseCloseRequested", "saga", saga, 3, 6, {"case_id": case_id,
           "outcome": "violation", "penalty_cents": 50_000}, **kw),
        ev("CaseClosed", "case", case_id, 3, 7, {"outcome": "violation",
           "penalty_cents": 50_000}, **kw),
        ev("SagaCompleted", "saga", saga, 4, 7, {"case_id": case_id, "outcome": "violation"},
           **kw),
    ]


def records(codec: EnvelopeCodec, events: list[Envelope], start: int = 0) -> list[Record]:
    # topic order as a consumer may see it: grouped per topic, not globally by time
    ordered = sorted(events, key=lambda e: codec.topic_for(e))
    return [record_of(codec, e, offset=start + i,
                      published_at=e.occurred_at + timedelta(milliseconds=5))
            for i, e in enumerate(ordered)]


def processor(codec: EnvelopeCodec, *, tables: AuditTables = AuditTables(),
              consumer: str = CONSUMER,
              mode: ProcessingMode = ProcessingMode.LIVE) -> BatchProcessor:
    return BatchProcessor(consumer=consumer, handlers=build_registry(tables), decoder=codec,
                          dead_letters=MemoryDeadLetters(),
                          settings=ConsumerSettings(mode=mode))


def apply(dsn: str, proc: BatchProcessor, recs: list[Record]) -> None:
    with psycopg.connect(dsn) as conn:
        proc.process(conn, recs)


def scalar(dsn: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


@pytest.fixture(scope="module")
def recorded(dsn: str, codec: EnvelopeCodec) -> tuple[str, list[Envelope]]:
    case_id = str(uuid.uuid4())
    events = journey(case_id)
    proc = processor(codec)
    apply(dsn, proc, records(codec, events))
    apply(dsn, processor(codec), records(codec, events))  # redelivered to a restarted consumer
    return case_id, events


def test_every_event_journaled_once(dsn: str, recorded: tuple[str, list[Envelope]]) -> None:
    case_id, events = recorded
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT event_id::text, event_type, case_id, kafka_topic, "
                            "published_at, payload FROM audit_journal WHERE correlation_id = %s",
                            (case_id,)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(e.event_id for e in events)
    assert {r[2] for r in rows} == {case_id}
    assert {r[3] for r in rows} == {"outbox.event.case", "outbox.event.saga",
                                    "outbox.event.decision", "outbox.event.notice"}
    assert all(r[4] is not None for r in rows)  # published_at from the Kafka timestamp
    opened = next(r for r in rows if r[1] == "CaseOpened")
    assert opened[5]["summary"] == "Stall without licence"  # v1 upcast to v3
    assert opened[5]["priority"] == "NORMAL" and "description" not in opened[5]


def test_journal_is_append_only(dsn: str, recorded: tuple[str, list[Envelope]]) -> None:
    case_id, _ = recorded
    for statement in ("UPDATE audit_journal SET summary = 'x' WHERE case_id = %s",
                      "DELETE FROM audit_journal WHERE case_id = %s"):
        with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement, (case_id,))
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("TRUNCATE audit_journal")
    assert scalar(dsn, "SELECT count(*) FROM audit_journal WHERE case_id = %s", case_id) == 9


def test_timeline_api_in_order_tenant_scoped(pool: ConnectionPool[Any],
                                             recorded: tuple[str, list[Envelope]]) -> None:
    case_id, events = recorded
    edge = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
    with TestClient(build_app(PgTimelineReader(pool), edge=edge)) as client:
        response = client.get(f"/audit/cases/{case_id}", headers=bearer_headers(TENANT))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["case_id"] == case_id
        assert [e["event_type"] for e in body["events"]] == [
            "CaseOpened", "CaseSubmitted", "DecisionRequested", "ViolationDetermined",
            "NoticeRequested", "NoticeIssued", "CaseCloseRequested", "CaseClosed",
            "SagaCompleted"]  # CaseClosed and SagaCompleted share occurred_at: version 3 < 4
        opened = body["events"][0]
        assert opened["event_version"] == 3 and opened["aggregate_type"] == "case"
        assert opened["summary"] == "Case opened: Unlicensed trading (severity 4, priority NORMAL)"
        assert opened["occurred_at"].startswith("2025-06-01T09:00:00")
        assert opened["published_at"] is not None and opened["source"] == "case"
        assert {e["event_id"] for e in body["events"]} == {e.event_id for e in events}
        assert body["freshness"]["case_last_applied_at"] is not None
        assert body["freshness"]["projection_last_applied_at"] is not None
        assert not any("r@example.org" in e["summary"] for e in body["events"])

        other = client.get(f"/audit/cases/{case_id}", headers=bearer_headers("tenant-y"))
        assert other.status_code == 404 and other.json()["code"] == "case_not_found"
        missing = client.get(f"/audit/cases/{case_id}", headers={"X-Tenant-Id": TENANT})
        assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
        assert client.get(f"/audit/cases/{uuid.uuid4()}",
                          headers=bearer_headers(TENANT)).status_code == 404


def test_event_without_case_is_journaled_only(dsn: str, codec: EnvelopeCodec) -> None:
    orphan = ev("SagaCompensated", "saga", str(uuid.uuid4()), 1, 0, {"case_id": "",
                "reason": "r"}, case_id="corr-orphan")
    apply(dsn, processor(codec), records(codec, [orphan], start=100))
    assert scalar(dsn, "SELECT count(*) FROM audit_journal WHERE event_id = %s",
                  orphan.event_id) == 1
    assert scalar(dsn, "SELECT count(*) FROM case_timeline WHERE event_id = %s",
                  orphan.event_id) == 0


def test_timeline_rebuilds_in_shadow_and_swaps_in(dsn: str, codec: EnvelopeCodec,
                                                  recorded: tuple[str, list[Envelope]]) -> None:
    case_id, events = recorded
    second = journey(str(uuid.uuid4()))
    apply(dsn, processor(codec), records(codec, second, start=200))
    columns = ("event_id, tenant_id, case_id, event_type, event_version, aggregate_type, "
               "aggregate_version, occurred_at, published_at, source, summary")
    with psycopg.connect(dsn) as conn:
        live = conn.execute(f"SELECT {columns} FROM case_timeline ORDER BY event_id").fetchall()
        journal_before = conn.execute("SELECT count(*) FROM audit_journal").fetchone()
        create_shadow_timeline(conn, "case_timeline_shadow")
        conn.commit()

    replay = processor(codec, tables=AuditTables(journal=None, timeline="case_timeline_shadow"),
                       consumer="audit.journal.replay-test", mode=ProcessingMode.REPLAY)
    apply(dsn, replay, records(codec, events + second, start=0))
    with psycopg.connect(dsn) as conn:
        rebuilt = conn.execute(
            f"SELECT {columns} FROM case_timeline_shadow ORDER BY event_id").fetchall()
        live_events = {r[0] for r in live}
        assert rebuilt == [r for r in live if r[0] in {r2[0] for r2 in rebuilt}]
        assert {r[0] for r in rebuilt} == {uuid.UUID(e.event_id) for e in events + second}
        assert {r[0] for r in rebuilt} <= live_events
        with conn.transaction():
            swap_in_timeline(conn, "case_timeline_shadow")
        assert conn.execute("SELECT count(*) FROM audit_journal").fetchone() == journal_before
        assert conn.execute("SELECT count(*) FROM case_timeline").fetchone() == (len(rebuilt),)
        assert conn.execute("SELECT to_regclass('case_timeline_shadow')").fetchone() == (None,)
    # the live handlers keep working on the swapped-in table
    third = journey(str(uuid.uuid4()))
    apply(dsn, processor(codec), records(codec, third, start=300))
    assert scalar(dsn, "SELECT count(*) FROM case_timeline WHERE case_id = %s",
                  third[0].aggregate_id) == 9
