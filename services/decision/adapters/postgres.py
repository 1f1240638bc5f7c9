"""PostgreSQL decision store (table ``decision`` of ``migrations/001_decisions.sql``), psycopg 3.

Works on the caller's connection inside the caller's transaction (never commits).
"""

from __future__ import annotations

from typing import Any

from casestream.errors import ConcurrencyError
from services.decision.domain.decision import Decision
from services.decision.domain.rules import Outcome, Verdict

_COLUMNS = ("case_id, tenant_id, saga_id, outcome, violation_code, penalty_cents, reason, "
            "rules_version, decided_at, request_event_id, version, penalty_reason")


def decision_from_row(row: tuple[Any, ...]) -> Decision:
    """A :class:`Decision` from a row of ``SELECT {_COLUMNS}``."""
    (case_id, tenant_id, saga_id, outcome, code, penalty, reason, rules_version, decided_at,
     request_event_id, version, penalty_reason) = row
    return Decision(case_id=case_id, tenant_id=tenant_id, saga_id=saga_id,
                    verdict=Verdict(outcome=Outcome(outcome), violation_code=code,
                                    penalty_cents=penalty, reason=reason,
                                    penalty_reason=penalty_reason),
                    rules_version=rules_version, decided_at=decided_at,
                    request_event_id=request_event_id, version=version)


class PgDecisionStore:
    """:class:`~services.decision.application.ports.DecisionStore` on one psycopg connection."""

    def __init__(self, conn: Any):
        self.conn = conn

    def get(self, case_id: str) -> Decision | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM decision WHERE case_id = %s",
                                (case_id,)).fetchone()
        return None if row is None else decision_from_row(row)

    def insert(self, decision: Decision) -> bool:
        v = decision.verdict
        row = self.conn.execute(
            f"""INSERT INTO decision ({_COLUMNS})
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (case_id) DO NOTHING RETURNING 1""",
            (decision.case_id, decision.tenant_id, decision.saga_id, v.outcome.value,
             v.violation_code, v.penalty_cents, v.reason, decision.rules_version,
             decision.decided_at, decision.request_event_id, decision.version,
             v.penalty_reason),
        ).fetchone()
        return row is not None

    def readdress(self, case_id: str, *, saga_id: str, expected_version: int,
                  step: int = 1) -> None:
        row = self.conn.execute(
            """UPDATE decision SET saga_id = %s, version = version + %s, updated_at = now()
               WHERE case_id = %s AND version = %s RETURNING 1""",
            (saga_id, step, case_id, expected_version)).fetchone()
        if row is None:
            current = self.get(case_id)
            raise ConcurrencyError("decision", case_id, expected_version,
                                   None if current is None else current.version)


class PgDecisionQueries:
    """Read side for ``GET /decisions/{case_id}`` over a psycopg_pool pool."""

    def __init__(self, pool: Any):
        self.pool = pool

    def get(self, case_id: str) -> Decision | None:
        with self.pool.connection() as conn:
            return PgDecisionStore(conn).get(case_id)
