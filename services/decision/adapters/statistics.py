"""Decision statistics projection (``decision.statistics``): violations and penalties per period.

One fact row per decision event (``ViolationDetermined``, ``NoViolationFound``,
``DecisionFailed``) in ``decision_statistics`` (decision database), keyed by event id
(``ON CONFLICT (event_id) DO NOTHING``: idempotent per event, the handover rule of
``casestream.handlers.projection``). Totals per tenant and period (UTC day or month of
``occurred_at``) are a ``GROUP BY`` (:func:`totals`). Live: consumer ``decision.statistics``
on ``outbox.event.decision`` (wired in ``bootstrap``); rebuild:
``casestream replay decision.statistics``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timezone
from typing import Any

from psycopg import sql

from casestream.events import Envelope
from casestream.handlers import HandlerRegistry
from casestream.handlers import (
    ProjectionSpec,
    TableNames,
    create_table_unless_exists,
    insert_batch_registry,
    max_applied_at,
)

NAME = "decision.statistics"
CONSUMER = "decision.statistics"
TOPICS = ("outbox.event.decision",)
TABLE = "decision_statistics"
OUTCOME_OF = {"ViolationDetermined": "violation", "NoViolationFound": "no_violation",
              "DecisionFailed": "failed"}

_DDL = """
CREATE TABLE {t} (
    event_id       uuid        PRIMARY KEY,
    tenant_id      text        NOT NULL,
    case_id        text        NOT NULL,
    outcome        text        NOT NULL,
    violation_code text,
    penalty_cents  bigint      NOT NULL DEFAULT 0,
    decided_at     timestamptz NOT NULL,
    period_day     date        NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now()
)
"""
_INDEX = "CREATE INDEX ON {t} (tenant_id, period_day)"
#: Columns written per fact row, in :func:`fact` order (``insert_batch_registry``).
FACT_COLUMNS = (("event_id", "uuid"), ("tenant_id", "text"), ("case_id", "text"),
                ("outcome", "text"), ("violation_code", "text"), ("penalty_cents", "bigint"),
                ("decided_at", "timestamptz"), ("period_day", "date"))
TOTALS = """
SELECT tenant_id, date_trunc({unit}, period_day)::date AS period,
       count(*) FILTER (WHERE outcome = 'violation') AS violations,
       count(*) FILTER (WHERE outcome = 'no_violation') AS no_violations,
       count(*) FILTER (WHERE outcome = 'failed') AS failed,
       coalesce(sum(penalty_cents), 0)::bigint AS penalty_cents
FROM {t} GROUP BY 1, 2 ORDER BY 1, 2
"""


def create_tables(conn: Any, names: TableNames) -> None:
    """Create ``names[decision_statistics]`` and its index unless it exists."""
    create_table_unless_exists(conn, names[TABLE], _DDL, _INDEX)


def fact(e: Envelope) -> tuple[Any, ...] | None:
    """The fact row of a decision event (pure), None for other types."""
    outcome = OUTCOME_OF.get(e.event_type)
    if outcome is None:
        return None
    p = e.payload
    day = e.occurred_at.astimezone(timezone.utc).date()
    penalty = int(p.get("penalty_cents") or 0) if outcome == "violation" else 0
    return (e.event_id, e.tenant_id, str(p.get("case_id") or e.aggregate_id), outcome,
            p.get("violation_code"), penalty, e.occurred_at, day)


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[decision_statistics]``."""
    return insert_batch_registry(f"decision.statistics[{names[TABLE]}]", names[TABLE],
                                 FACT_COLUMNS,
                                 lambda events: [r for r in map(fact, events) if r is not None],
                                 OUTCOME_OF)


def totals(conn: Any, period: str = "day", table: str = TABLE) -> list[tuple[Any, ...]]:
    """(tenant_id, period start, violations, no_violations, failed, penalty_cents) rows.

    ``period``: ``day`` or ``month`` (UTC). Raises ValueError for another period.
    """
    if period not in ("day", "month"):
        raise ValueError(f"period must be 'day' or 'month', got {period!r}")
    q = sql.SQL(TOTALS).format(unit=sql.Literal(period), t=sql.Identifier(table))
    return conn.execute(q).fetchall()


def _dsn() -> str:
    from services.decision.settings import DecisionSettings

    s = DecisionSettings()
    return s.database_url(s.database)


PROJECTION = ProjectionSpec(
    name=NAME, description="decision statistics (violations and penalty totals per period)",
    topics=TOPICS, live_consumer=CONSUMER, tables=(TABLE,), dsn=_dsn,
    create_tables=create_tables, registry=registry, freshness=max_applied_at(TABLE))
