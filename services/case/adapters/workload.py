"""Officer workload projection (``case.workload``): open cases and overdue evidence per officer.

One row per case in ``officer_workload`` (case database): its officer, whether it is open,
and its evidence request (status, due date), maintained by PROJECTION handlers from
``outbox.event.case``; the per-officer view is a ``GROUP BY`` over it (:func:`workload`),
where evidence counts as overdue when it was requested, not submitted, and its due date
has passed at query time (whether or not the reminder, EvidenceOverdue, was recorded yet). Live: consumer ``case.workload`` (wired in ``bootstrap``);
rebuild: ``casestream replay case.workload``.

Idempotent per event (handover rule of ``casestream.handlers.projection``): a row is only
replaced by a higher aggregate version, so re-applying an event changes nothing. Within a
batch the events of a case fold into one row; a field no event of the batch sets is kept
(``coalesce`` with the stored row).

Open: CaseOpened, AppealSubmitted (reopened for review) -> open; CaseClosed, CaseReturned,
CaseWithdrawn -> not open; the other events keep it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql

from casestream.handlers import HandlerRegistry
from casestream.events import Envelope
from casestream.handlers import (
    ProjectionSpec,
    TableNames,
    create_table_unless_exists,
    json_batch_registry,
    max_applied_at,
)

from services.case.settings import projection_dsn

NAME = "case.workload"
CONSUMER = "case.workload"
TOPICS = ("outbox.event.case",)
TABLE = "officer_workload"

OPEN_AFTER: dict[str, bool | None] = {
    "CaseOpened": True, "AppealSubmitted": True, "CaseClosed": False, "CaseReturned": False,
    "CaseWithdrawn": False, "CaseAssigned": None, "EvidenceRequested": None,
    "EvidenceSubmitted": None, "ReviewStarted": None, "CaseSubmitted": None,
    "EvidenceOverdue": None, "CaseEscalated": None,
}
"""Event types handled -> the case is open after it (None: unchanged)."""

COLUMNS = ("case_id", "tenant_id", "officer_id", "open", "evidence_status", "evidence_due_at",
           "last_version")

_DDL = """
CREATE TABLE {t} (
    case_id          text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    officer_id       text,
    open             boolean,
    evidence_status  text,
    evidence_due_at  timestamptz,
    last_version     bigint      NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now()
)
"""
_INDEX = "CREATE INDEX ON {t} (tenant_id, officer_id)"

_UPSERT = """
INSERT INTO {t} AS w (case_id, tenant_id, officer_id, open, evidence_status, evidence_due_at,
                      last_version)
SELECT r->>0, r->>1, r->>2, (r->>3)::boolean, r->>4, (r->>5)::timestamptz, (r->>6)::bigint
FROM jsonb_array_elements(%s::jsonb) r
ON CONFLICT (case_id) DO UPDATE SET
    officer_id = coalesce(EXCLUDED.officer_id, w.officer_id),
    open = coalesce(EXCLUDED.open, w.open),
    evidence_status = coalesce(EXCLUDED.evidence_status, w.evidence_status),
    evidence_due_at = coalesce(EXCLUDED.evidence_due_at, w.evidence_due_at),
    last_version = EXCLUDED.last_version,
    applied_at = now()
WHERE w.last_version < EXCLUDED.last_version
"""

WORKLOAD = """
SELECT tenant_id, officer_id, count(*) FILTER (WHERE open) AS open_cases,
       count(*) FILTER (WHERE open AND evidence_status IN ('requested', 'overdue')
                        AND evidence_due_at < %s) AS overdue_evidence
FROM {t} WHERE officer_id IS NOT NULL
GROUP BY tenant_id, officer_id ORDER BY tenant_id, officer_id
"""


def create_tables(conn: Any, names: TableNames) -> None:
    """Create ``names[officer_workload]`` with its index unless it exists."""
    create_table_unless_exists(conn, names[TABLE], _DDL, _INDEX)


def fold(events: Sequence[Envelope]) -> list[tuple[Any, ...]]:
    """Reduce events (in order) to one row per case, in :data:`COLUMNS` order. Pure."""
    rows: dict[str, list[Any]] = {}
    for e in events:
        if e.event_type not in OPEN_AFTER:
            continue
        r = rows.get(e.aggregate_id)
        if r is None:
            r = rows[e.aggregate_id] = [e.aggregate_id, e.tenant_id, None, None, None, None, None]
        p = e.payload
        if OPEN_AFTER[e.event_type] is not None:
            r[3] = OPEN_AFTER[e.event_type]
        if e.event_type == "CaseAssigned":
            r[2] = p["officer_id"]
        elif e.event_type == "EvidenceRequested":
            r[4], r[5] = "requested", p["due_at"]
        elif e.event_type == "EvidenceSubmitted":
            r[4] = "submitted"
        elif e.event_type == "EvidenceOverdue":
            r[4] = "overdue"
        r[6] = e.aggregate_version
    return [tuple(r) for r in rows.values()]


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[officer_workload]`` (one statement per run)."""
    upsert = sql.SQL(_UPSERT).format(t=sql.Identifier(names[TABLE]))
    return json_batch_registry(f"case.workload[{names[TABLE]}]", upsert, fold, OPEN_AFTER)


def workload(conn: Any, now: datetime, table: str = TABLE) -> list[tuple[str, str, int, int]]:
    """(tenant_id, officer_id, open cases, cases with overdue evidence at ``now``) per officer."""
    return conn.execute(sql.SQL(WORKLOAD).format(t=sql.Identifier(table)), (now,)).fetchall()


PROJECTION = ProjectionSpec(
    name=NAME, description="officer workload (open cases and overdue evidence per officer)",
    topics=TOPICS, live_consumer=CONSUMER, tables=(TABLE,), dsn=projection_dsn,
    create_tables=create_tables, registry=registry, freshness=max_applied_at(TABLE))
