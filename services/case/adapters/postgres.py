"""PostgreSQL adapters of the case ports (psycopg 3): repository, evidence store, unit of work.

Tables: ``migrations/*.sql`` (``cases``, ``case_evidence``), the outbox from
``casestream.outbox.writer`` and ``idempotency_keys`` from ``casestream.http`` (its
``PgIdempotencyStore`` is the unit of work's idempotency store). A :class:`PgUnitOfWork` is one transaction on a pooled
connection; :meth:`PgUnitOfWork.bound` wraps a connection whose transaction belongs to
someone else (the consumer runtime's batch) and never commits or rolls back itself.

Optimistic concurrency: ``UPDATE cases ... WHERE id = %s AND version = <loaded version>``;
no row updated -> :class:`casestream.errors.ConcurrencyError`. Connection failures are translated to :class:`StorageUnavailable`
at this boundary (``raise ... from e``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from casestream.events import Envelope
from casestream.errors import ConcurrencyError
from casestream.http import PgIdempotencyStore

from services.case.application.commands import CaseQuery, EvidenceView
from services.case.application.errors import StorageUnavailable
from services.case.domain.case import Case
from services.case.domain.values import CaseContent, CaseStatus, Outcome, Resolution

AppendEvents = Callable[[psycopg.Connection[Any], Sequence[Envelope]], Any]
"""``OutboxWriter.append``-shaped: inserts encoded events using the given connection."""


@contextmanager
def translate_errors() -> Iterator[None]:
    """Map driver connection failures to :class:`StorageUnavailable` (one boundary)."""
    try:
        yield
    except PoolTimeout as e:
        raise StorageUnavailable("no database connection available in time") from e
    except psycopg.OperationalError as e:
        raise StorageUnavailable("database connection failed") from e


_CASE_COLUMNS = (
    "id, tenant_id, status, version, title, summary, severity, evidence_count, reporter_email, "
    "priority, opened_by, opened_at, updated_at, submitted_by, submitted_at, note, outcome, "
    "penalty_cents, return_reason, resolved_at, officer_id, evidence_status, "
    "evidence_request_id, evidence_description, evidence_due_at, review_started_at, "
    "withdraw_reason, appeal_reason, appealed_at, evidence_escalate_at"
)
_WORKFLOW_FIELDS = ("officer_id", "evidence_status", "evidence_request_id", "evidence_description",
                    "evidence_due_at", "review_started_at", "withdraw_reason", "appeal_reason",
                    "appealed_at", "evidence_escalate_at")


def _case_params(case: Case) -> dict[str, Any]:
    c, r = case.content, case.resolution
    return {
        "id": case.id, "tenant_id": case.tenant_id, "status": case.status.value,
        "version": case.version, "title": c.title, "summary": c.summary,
        "severity": c.severity, "evidence_count": c.evidence_count,
        "reporter_email": c.reporter_email, "priority": c.priority.value,
        "opened_by": case.opened_by, "opened_at": case.opened_at,
        "updated_at": case.updated_at, "submitted_by": case.submitted_by,
        "submitted_at": case.submitted_at, "note": case.note,
        "outcome": r.outcome.value if r and r.outcome else None,
        "penalty_cents": r.penalty_cents if r else None,
        "return_reason": r.reason if r else None, "resolved_at": case.resolved_at,
        "loaded_version": case.loaded_version,
        **{f: getattr(case, f) for f in _WORKFLOW_FIELDS},
    }


def _case_from_row(row: dict[str, Any]) -> Case:
    resolution = None
    if row["outcome"] is not None:
        resolution = Resolution(outcome=Outcome(row["outcome"]), penalty_cents=row["penalty_cents"])
    elif row["return_reason"] is not None:
        resolution = Resolution(reason=row["return_reason"])
    return Case(
        id=str(row["id"]), tenant_id=row["tenant_id"],
        content=CaseContent(title=row["title"], summary=row["summary"], severity=row["severity"],
                            evidence_count=row["evidence_count"],
                            reporter_email=row["reporter_email"], priority=row["priority"]),
        status=CaseStatus(row["status"]), version=row["version"], opened_by=row["opened_by"],
        opened_at=row["opened_at"], updated_at=row["updated_at"],
        submitted_by=row["submitted_by"], submitted_at=row["submitted_at"], note=row["note"],
        resolution=resolution, resolved_at=row["resolved_at"],
        **{f: (str(row[f]) if f == "evidence_request_id" and row[f] is not None else row[f])
           for f in _WORKFLOW_FIELDS},
    )


class PgCaseRepository:
    """``CaseRepository`` over one connection (the unit of work's)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def get(self, tenant_id: str, case_id: str) -> Case | None:
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(f"SELECT {_CASE_COLUMNS} FROM cases WHERE id = %s AND tenant_id = %s",
                        (case_id, tenant_id))
            row = cur.fetchone()
        return _case_from_row(row) if row else None

    def add(self, case: Case) -> None:
        values = ", ".join(f"%({c.strip()})s" for c in _CASE_COLUMNS.split(","))
        try:
            self._conn.execute(f"INSERT INTO cases ({_CASE_COLUMNS}) VALUES ({values})",
                               _case_params(case))
        except psycopg.errors.UniqueViolation as e:
            raise ConcurrencyError("case", case.id, 0, None) from e

    def update(self, case: Case) -> None:
        assignments = ", ".join(
            f"{c} = %({c})s" for c in (x.strip() for x in _CASE_COLUMNS.split(","))
            if c not in ("id", "tenant_id", "opened_by", "opened_at"))
        # RETURNING + fetchone (not rowcount): correct in pipeline mode too, where the
        # consumer runtime runs handlers and rowcount is unknown until the pipeline syncs.
        updated = self._conn.execute(
            f"UPDATE cases SET {assignments} WHERE id = %(id)s AND tenant_id = %(tenant_id)s "
            "AND version = %(loaded_version)s RETURNING version", _case_params(case)).fetchone()
        if updated is None:
            row = self._conn.execute("SELECT version FROM cases WHERE id = %s",
                                     (case.id,)).fetchone()
            raise ConcurrencyError("case", case.id, case.loaded_version, row[0] if row else None)


    def search(self, query: CaseQuery) -> list[Case]:
        where, params = ["tenant_id = %s"], [query.tenant_id]
        for column, value in (("status", query.status), ("officer_id", query.officer_id),
                              ("severity", query.severity)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if query.opened_from is not None:
            where.append("opened_at >= %s")
            params.append(query.opened_from)
        if query.opened_to is not None:
            where.append("opened_at < %s")
            params.append(query.opened_to)
        if query.after is not None:
            where.append("(opened_at, id) > (%s, %s)")
            params.extend(query.after)
        params.append(query.limit)
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(f"SELECT {_CASE_COLUMNS} FROM cases WHERE {' AND '.join(where)} "
                        "ORDER BY opened_at, id LIMIT %s", params)
            return [_case_from_row(row) for row in cur.fetchall()]


    def evidence_deadlines_due(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        """``(tenant_id, id)`` of cases awaiting evidence whose due date or escalation time
        passed at ``now`` (oldest first, at most ``limit``)."""
        rows = self._conn.execute(
            "SELECT tenant_id, id FROM cases WHERE status = 'awaiting_evidence' AND ("
            "(evidence_status = 'requested' AND evidence_due_at <= %s) OR "
            "(evidence_status = 'overdue' AND evidence_escalate_at <= %s)) "
            "ORDER BY evidence_due_at LIMIT %s", (now, now, limit)).fetchall()
        return [(tenant, str(case_id)) for tenant, case_id in rows]


class PgEvidenceStore:
    """``EvidenceStore`` over one connection: ``case_evidence`` rows, content as bytea."""

    _COLUMNS = ("id, case_id, request_id, name, media_type, size_bytes, sha256, submitted_by, "
                "submitted_at")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def add(self, item: EvidenceView, content: bytes) -> None:
        self._conn.execute(
            "INSERT INTO case_evidence (id, case_id, tenant_id, request_id, name, media_type, "
            "size_bytes, sha256, content, submitted_by, submitted_at) "
            "SELECT %s, id, tenant_id, %s, %s, %s, %s, %s, %s, %s, %s FROM cases WHERE id = %s",
            (item.id, item.request_id, item.name, item.media_type, item.size_bytes, item.sha256,
             content, item.submitted_by, item.submitted_at, item.case_id))

    def list(self, tenant_id: str, case_id: str) -> list[EvidenceView]:
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(f"SELECT {self._COLUMNS} FROM case_evidence WHERE tenant_id = %s "
                        "AND case_id = %s ORDER BY submitted_at, id", (tenant_id, case_id))
            rows = cur.fetchall()
        return [EvidenceView(**{**row, "id": str(row["id"]), "case_id": str(row["case_id"]),
                                "request_id": str(row["request_id"]) if row["request_id"] else None})
                for row in rows]

    def content(self, tenant_id: str, case_id: str, evidence_id: str) -> bytes | None:
        row = self._conn.execute(
            "SELECT content FROM case_evidence WHERE tenant_id = %s AND case_id = %s AND id = %s",
            (tenant_id, case_id, evidence_id)).fetchone()
        return bytes(row[0]) if row else None


class _BoundOutbox:
    def __init__(self, conn: psycopg.Connection[Any], append: AppendEvents) -> None:
        self._conn, self._append = conn, append

    def append(self, events: Sequence[Envelope]) -> None:
        if events:
            self._append(self._conn, events)


class PgUnitOfWork:
    """One transaction: cases, idempotency records and outbox rows commit together.

    Use :meth:`factory` for HTTP commands (own pooled connection and transaction) and
    :meth:`bound` inside a consumer handler (the runtime owns the transaction).
    """

    def __init__(self, *, pool: ConnectionPool[Any] | None, append: AppendEvents,
                 conn: psycopg.Connection[Any] | None = None) -> None:
        self._pool = pool
        self._append = append
        self._stack: ExitStack | None = None
        if conn is not None:
            self._bind(conn)

    @classmethod
    def factory(cls, pool: ConnectionPool[Any], append: AppendEvents) -> Callable[[], PgUnitOfWork]:
        """A ``UnitOfWorkFactory``: each call opens a new transaction on a pooled connection."""
        return lambda: cls(pool=pool, append=append)

    @classmethod
    def bound(cls, conn: psycopg.Connection[Any], append: AppendEvents) -> PgUnitOfWork:
        """A unit of work over ``conn`` inside someone else's transaction (no commit here)."""
        return cls(pool=None, append=append, conn=conn)

    def _bind(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.cases = PgCaseRepository(conn)
        self.idempotency = PgIdempotencyStore(conn)
        self.evidence = PgEvidenceStore(conn)
        self.outbox = _BoundOutbox(conn, self._append)

    def __enter__(self) -> PgUnitOfWork:
        if self._pool is None:
            return self
        stack = ExitStack()
        stack.enter_context(translate_errors())  # outermost: sees body, commit and enter errors
        try:
            conn = stack.enter_context(self._pool.connection())
            # A request's DeadlinePool checkout is already a transaction that it commits (its
            # SET LOCAL statement_timeout opened it): a nested block would only add a
            # SAVEPOINT and a RELEASE round trip to every request.
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                stack.enter_context(conn.transaction())
        except BaseException as e:
            if not stack.__exit__(type(e), e, e.__traceback__):
                raise
            raise AssertionError("unreachable: translate_errors never suppresses") from e
        self._stack = stack
        self._bind(conn)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.__exit__(exc_type, exc, tb)
