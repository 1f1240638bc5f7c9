"""Case dashboard projection (``case.dashboard``): cases per status and tenant, last change,
and per case its officer, evidence status, penalty and appeal state.

One row per case in ``case_dashboard`` (case database), maintained by PROJECTION handlers
from ``outbox.event.case``; the per-tenant/per-status view is a ``GROUP BY`` over it
(:func:`summary`). Live: consumer ``case.dashboard`` (wired in ``bootstrap``); rebuild:
``casestream replay case.dashboard``.

Idempotent per event (handover rule of ``casestream.handlers.projection``): a case row is
only replaced by a higher aggregate version (``WHERE last_version < EXCLUDED.last_version``),
so re-applying an event already reflected changes nothing.

Status from the last event that sets one (:data:`STATUS_OF`; None keeps it): CaseOpened →
open, CaseSubmitted → submitted, CaseClosed → closed (with outcome and penalty), CaseReturned →
returned, the workflow events → their status (``services.case.domain.values.CaseStatus``).
Evidence status: EvidenceRequested → requested, EvidenceOverdue → overdue,
EvidenceSubmitted → submitted. Appeal state:
AppealSubmitted → appealed, a CaseClosed after it → decided. A field no event of a batch sets is
kept (``coalesce`` with the stored row). Tables created before these columns get them added
by the case migration ``004_dashboard_columns.sql``, empty until ``casestream replay
case.dashboard`` fills them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql

from casestream.events import Envelope
from casestream.handlers import HandlerRegistry
from casestream.handlers import (
    ProjectionSpec,
    TableNames,
    create_table_unless_exists,
    json_batch_registry,
    max_applied_at,
)

from services.case.settings import projection_dsn

NAME = "case.dashboard"
CONSUMER = "case.dashboard"
TOPICS = ("outbox.event.case",)
TABLE = "case_dashboard"
STATUS_OF: dict[str, str | None] = {
    "CaseOpened": "open", "CaseSubmitted": "submitted", "CaseClosed": "closed",
    "CaseReturned": "returned", "CaseAssigned": None, "EvidenceRequested": "awaiting_evidence",
    "EvidenceSubmitted": "under_review", "ReviewStarted": "under_review",
    "CaseWithdrawn": "withdrawn", "AppealSubmitted": "appealed", "EvidenceOverdue": None,
    "CaseEscalated": "manual_review"}
COLUMNS = ("case_id", "tenant_id", "status", "severity", "priority", "outcome", "opened_at",
           "last_change", "last_event_type", "last_version", "officer_id", "evidence_status",
           "penalty_cents", "appeal_state")

_DDL = """
CREATE TABLE {t} (
    case_id         text        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    status          text,
    severity        integer,
    priority        text,
    outcome         text,
    opened_at       timestamptz,
    last_change     timestamptz NOT NULL,
    last_event_type text        NOT NULL,
    last_version    bigint      NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    officer_id      text,
    evidence_status text,
    penalty_cents   bigint,
    appeal_state    text
)
"""
_INDEX = "CREATE INDEX ON {t} (tenant_id, status)"

_UPSERT = """
INSERT INTO {t} AS d (case_id, tenant_id, status, severity, priority, outcome, opened_at,
                      last_change, last_event_type, last_version, officer_id, evidence_status,
                      penalty_cents, appeal_state)
SELECT r->>0, r->>1, r->>2, (r->>3)::int, r->>4, r->>5, (r->>6)::timestamptz,
       (r->>7)::timestamptz, r->>8, (r->>9)::bigint, r->>10, r->>11, (r->>12)::bigint, r->>13
FROM jsonb_array_elements(%s::jsonb) r
ON CONFLICT (case_id) DO UPDATE SET
    status = coalesce(EXCLUDED.status, d.status),
    officer_id = coalesce(EXCLUDED.officer_id, d.officer_id),
    evidence_status = coalesce(EXCLUDED.evidence_status, d.evidence_status),
    penalty_cents = CASE WHEN EXCLUDED.outcome = 'no_violation' THEN NULL  -- withdrawn on appeal
                         ELSE coalesce(EXCLUDED.penalty_cents, d.penalty_cents) END,
    appeal_state = CASE WHEN EXCLUDED.appeal_state IS NULL AND EXCLUDED.outcome IS NOT NULL
                             AND d.appeal_state = 'appealed' THEN 'decided'
                        ELSE coalesce(EXCLUDED.appeal_state, d.appeal_state) END,
    severity = coalesce(EXCLUDED.severity, d.severity),
    priority = coalesce(EXCLUDED.priority, d.priority),
    outcome = coalesce(EXCLUDED.outcome, d.outcome),
    opened_at = coalesce(d.opened_at, EXCLUDED.opened_at),
    last_change = EXCLUDED.last_change,
    last_event_type = EXCLUDED.last_event_type,
    last_version = EXCLUDED.last_version,
    applied_at = now()
WHERE d.last_version < EXCLUDED.last_version
"""

SUMMARY = """
SELECT tenant_id, status, count(*) AS cases, max(last_change) AS last_change
FROM {t} GROUP BY tenant_id, status ORDER BY tenant_id, status
"""

CASE_ROW = """
SELECT status, officer_id, evidence_status, outcome, penalty_cents, appeal_state
FROM {t} WHERE case_id = %s
"""


def create_tables(conn: Any, names: TableNames) -> None:
    """Create ``names[case_dashboard]`` with its index unless it exists (index auto-named).

    An existing table is not checked (start-up and replays issue no ALTER TABLE): the case
    migration ``004_dashboard_columns.sql`` brings a table of an earlier version up to
    :data:`COLUMNS`."""
    create_table_unless_exists(conn, names[TABLE], _DDL, _INDEX)


def fold(events: Sequence[Envelope]) -> list[tuple[Any, ...]]:
    """Reduce events (in order) to one row per case: the state after its last event.

    Pure. Returns tuples in :data:`COLUMNS` order.
    """
    rows: dict[str, list[Any]] = {}
    for e in events:
        if e.event_type not in STATUS_OF:
            continue
        status = STATUS_OF[e.event_type]
        r = rows.get(e.aggregate_id)
        if r is None:
            r = rows[e.aggregate_id] = [e.aggregate_id, e.tenant_id, status] + [None] * 11
        p = e.payload
        if status is not None:
            r[2] = status
        if "severity" in p:
            r[3] = p["severity"]
        match e.event_type:
            case "CaseOpened":
                r[4] = p.get("priority")
                r[6] = e.occurred_at
            case "CaseClosed":
                r[5], r[12] = p.get("outcome"), p.get("penalty_cents")
                if r[13] == "appealed":  # an appeal earlier in the batch (else: the SQL)
                    r[13] = "decided"
            case "CaseAssigned":
                r[10] = p["officer_id"]
            case "EvidenceRequested":
                r[11] = "requested"
            case "EvidenceSubmitted":
                r[11] = "submitted"
            case "EvidenceOverdue":
                r[11] = "overdue"
            case "AppealSubmitted":
                r[13] = "appealed"
        r[7], r[8], r[9] = e.occurred_at, e.event_type, e.aggregate_version
    return [tuple(r) for r in rows.values()]


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[case_dashboard]`` (one statement per run)."""
    upsert = sql.SQL(_UPSERT).format(t=sql.Identifier(names[TABLE]))
    return json_batch_registry(f"case.dashboard[{names[TABLE]}]", upsert, fold, STATUS_OF)


def summary(conn: Any, table: str = TABLE) -> list[tuple[str, str, int, datetime]]:
    """(tenant_id, status, cases, last change) per tenant and status."""
    return conn.execute(sql.SQL(SUMMARY).format(t=sql.Identifier(table))).fetchall()


def case_row(conn: Any, case_id: str, table: str = TABLE) -> tuple[Any, ...] | None:
    """(status, officer_id, evidence_status, outcome, penalty_cents, appeal_state) of a case."""
    return conn.execute(sql.SQL(CASE_ROW).format(t=sql.Identifier(table)), (case_id,)).fetchone()


PROJECTION = ProjectionSpec(
    name=NAME,
    description="case dashboard (cases per status and tenant; officer, evidence, penalty, "
                "appeal per case)",
    topics=TOPICS, live_consumer=CONSUMER, tables=(TABLE,), dsn=projection_dsn,
    create_tables=create_tables, registry=registry, freshness=max_applied_at(TABLE))
