"""``casestream reconcile``: find (and with ``--repair`` fix) drift between the case, saga and
outbox databases.

Checks, each against rows older than ``--threshold-s`` (default 300 s, so work in flight is
never mistaken for drift):

``submitted-without-saga``
    a case in status ``submitted`` with no saga in the saga database. Repair: the case's
    ``CaseSubmitted`` row is read back from the case service's outbox, decoded with the
    codec, and handed to the saga orchestrator's use case in a saga-database transaction
    — exactly what the consumer would have done. The saga id is derived from that event id,
    so a later delivery of the same event is a no-op ("duplicate start"). Without the outbox
    row (cleaned by retention) the finding is only reported.
``completed-saga-case-open``
    a COMPLETED saga whose case is not ``closed``. Repair (case still ``submitted`` only):
    the saga re-issues ``CaseCloseRequested`` (history trigger ``@reconcile``; the case
    service closes idempotently). A re-issue younger than the threshold is not repeated, so
    back-to-back runs do not pile up requests. A case in another status is reported.
``outbox-pending``
    outbox rows of any service database still ``pending`` (or ``failed``) after the
    threshold: the relay is down or blocked. Reported with count and oldest age; re-drive
    failed rows with ``casestream outbox redrive``.

Idempotent and safe at any time (also while the services run): every read is a snapshot,
every repair is one short transaction that re-checks its precondition, and both repairs
are no-ops when repeated. Exit status 0 when nothing is left unrepaired, 1 when drift
remains (so a scheduled job can alert), 2 on a usage or connection error.

Databases: ``CASESTREAM_PG_URL`` plus each service's database name
(``CASESTREAM_<SVC>_DATABASE``, defaults = service names), or ``--pg-url`` /
``--<svc>-db``. Repairs need the schema registry (``CASESTREAM_REGISTRY_URL``) and read the
saga settings (``CASESTREAM_SAGA_*``: deadlines) like the orchestrator does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import psycopg

SERVICES = ("case", "saga", "decision", "notification", "audit")
RECONCILE_NOTE = "reconcile: saga COMPLETED but case not closed; close requested again"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One piece of drift.

    Attributes:
        kind: ``submitted-without-saga`` | ``completed-saga-case-open`` | ``outbox-pending``.
        database: the service database it was found in (``case``, ``saga``, ...).
        subject: case id, saga id or ``outbox``.
        detail: one sentence.
        repaired: True if this run fixed it.
    """

    kind: str
    database: str
    subject: str
    detail: str
    repaired: bool = False


def _dsn(pg_url: str, db: str) -> str:
    return f"{pg_url.rstrip('/')}/{db}"


# -- checks (read only) -------------------------------------------------------------------

def submitted_without_saga(case_conn: Any, saga_conn: Any, *, older_than: datetime,
                           limit: int) -> list[tuple[str, str]]:
    """``[(case_id, tenant_id)]`` of cases submitted before ``older_than`` with no saga for
    that submission: no active saga and none started at or after the case's ``submitted_at``
    (a case returned and submitted again needs a new saga)."""
    rows = case_conn.execute(
        """SELECT id::text, tenant_id, coalesce(submitted_at, updated_at) FROM cases
           WHERE status = 'submitted' AND coalesce(submitted_at, updated_at) < %s
           ORDER BY 3 LIMIT %s""", (older_than, limit)).fetchall()
    if not rows:
        return []
    sagas = {r[0]: (r[1], r[2]) for r in saga_conn.execute(
        """SELECT case_id, max(created_at), bool_or(active) FROM saga
           WHERE case_id = ANY(%s) GROUP BY case_id""", ([r[0] for r in rows],)).fetchall()}
    out = []
    for case_id, tenant, submitted_at in rows:
        newest, active = sagas.get(case_id, (None, False))
        if not active and (newest is None or newest < submitted_at):
            out.append((case_id, tenant))
    return out


def completed_not_closed(case_conn: Any, saga_conn: Any, *, older_than: datetime,
                         limit: int) -> list[tuple[str, str, str]]:
    """``[(saga_id, case_id, case status)]``: COMPLETED before ``older_than``, case not closed
    (status ``missing`` if the case row does not exist)."""
    sagas = saga_conn.execute(
        """SELECT DISTINCT ON (case_id) saga_id::text, case_id FROM saga
           WHERE state = 'COMPLETED' AND updated_at < %s
             AND NOT EXISTS (SELECT 1 FROM saga newer WHERE newer.case_id = saga.case_id
                             AND newer.created_at > saga.created_at)
           ORDER BY case_id, created_at DESC LIMIT %s""", (older_than, limit)).fetchall()
    if not sagas:
        return []
    status = dict(case_conn.execute(
        "SELECT id::text, status FROM cases WHERE id::text = ANY(%s)",
        ([s[1] for s in sagas],)).fetchall())
    return [(sid, cid, status.get(cid, "missing")) for sid, cid in sagas
            if status.get(cid) != "closed"]


def stale_outbox(conn: Any, *, older_than: datetime) -> tuple[int, int, datetime | None]:
    """``(pending, failed, oldest created_at)`` of outbox rows created before ``older_than``."""
    row = conn.execute(
        """SELECT count(*) FILTER (WHERE status = 'pending'),
                  count(*) FILTER (WHERE status = 'failed'), min(created_at)
           FROM outbox WHERE status IN ('pending', 'failed') AND created_at < %s""",
        (older_than,)).fetchone()
    return int(row[0]), int(row[1]), row[2]


# -- repairs --------------------------------------------------------------------------------

class _SagaRepairs:
    """Lazily built orchestrator, codec and outbox writer (only when ``--repair`` needs them)."""

    def __init__(self, registry_url: str | None) -> None:
        from casestream.clock import SystemClock
        from casestream.events import load_catalog, open_codec
        from casestream.outbox import OutboxWriter
        from casestream.service import read_settings
        from services import schemas_dir
        from services.saga import SERVICE
        from services.saga.application.orchestrator import Orchestrator
        from services.saga.bootstrap import definitions_from
        from services.saga.settings import SagaSettings

        settings = read_settings(SagaSettings, SERVICE.name)
        catalog = load_catalog(schemas_dir())
        self.codec = open_codec(catalog, registry_url or settings.registry_url, auto_register=False)
        self.registry = self.codec.registry
        self.orchestrator = Orchestrator(definitions_from(settings, catalog), clock=SystemClock())
        self.outbox = OutboxWriter(self.codec)

    def close(self) -> None:
        """Close the registry client."""
        self.registry.close()

    def _units(self, saga_conn: Any) -> tuple[Any, Any]:
        from casestream.outbox import OutboxSink
        from services.saga.adapters.postgres import PgSagaStore

        return PgSagaStore(saga_conn), OutboxSink(self.outbox, saga_conn)

    def start_saga(self, case_conn: Any, saga_conn: Any, case_id: str) -> str:
        """Start the missing saga from the case's CaseSubmitted outbox row; returns a note."""
        row = case_conn.execute(
            """SELECT payload FROM outbox WHERE aggregateid = %s AND type = 'CaseSubmitted'
               ORDER BY seq DESC LIMIT 1""", (case_id,)).fetchone()
        if row is None:
            raise LookupError("its CaseSubmitted outbox row is gone (retention); start the "
                              "saga by resubmitting the case")
        event = self.codec.decode(bytes(row[0]))
        with saga_conn.transaction():
            store, sink = self._units(saga_conn)
            done = self.orchestrator.handle(store, sink, event)
        return f"saga {done.saga_id} started from CaseSubmitted {event.event_id} ({done.note or 'started'})"

    def reissue_close(self, saga_conn: Any, saga_id: str, *, not_since: datetime) -> bool:
        """Re-issue CaseCloseRequested unless a reconcile re-issue happened after ``not_since``."""
        with saga_conn.transaction():
            recent = saga_conn.execute(
                """SELECT 1 FROM saga_history WHERE saga_id = %s::uuid AND trigger = '@reconcile'
                   AND at > %s LIMIT 1""", (saga_id, not_since)).fetchone()
            if recent is not None:
                return False
            store, sink = self._units(saga_conn)
            saga = store.get(saga_id)
            if saga is None or saga.state != "COMPLETED":
                return False
            self.orchestrator.reissue(store, sink, saga_id, step="close", note=RECONCILE_NOTE,
                                      actor_id="reconcile")
        return True


# -- the job --------------------------------------------------------------------------------

@contextmanager
def _connect(dsn: str) -> Iterator[Any]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5,
                         application_name="casestream.reconcile") as conn:
        yield conn


def _case_saga_drift(case_conn: Any, saga_conn: Any, *, older_than: datetime, repair: bool,
                     limit: int, repairs: Callable[[], _SagaRepairs],
                     not_since: datetime) -> list[Finding]:
    findings: list[Finding] = []
    for case_id, tenant in submitted_without_saga(case_conn, saga_conn,
                                                  older_than=older_than, limit=limit):
        detail, repaired = f"case (tenant {tenant}) is submitted but has no saga", False
        if repair:
            try:
                detail += "; " + repairs().start_saga(case_conn, saga_conn, case_id)
                repaired = True
            except LookupError as e:
                detail += f"; not repaired: {e}"
        findings.append(Finding(kind="submitted-without-saga", database="case",
                                subject=case_id, detail=detail, repaired=repaired))
    for saga_id, case_id, status in completed_not_closed(case_conn, saga_conn,
                                                         older_than=older_than, limit=limit):
        detail, repaired = f"saga COMPLETED but case {case_id} is {status}", False
        if repair and status == "submitted":
            if repairs().reissue_close(saga_conn, saga_id, not_since=not_since):
                detail += "; CaseCloseRequested re-issued"
            else:
                detail += "; close already re-issued recently, waiting for the case service"
            repaired = True
        elif repair:
            detail += "; not repaired: only a submitted case can be closed, ask an operator"
        findings.append(Finding(kind="completed-saga-case-open", database="saga",
                                subject=saga_id, detail=detail, repaired=repaired))
    return findings


def run_reconcile(*, pg_url: str, databases: dict[str, str], threshold: timedelta,
                  repair: bool, registry_url: str | None = None, limit: int = 1000,
                  now: datetime | None = None) -> list[Finding]:
    """Run every check (and repair when ``repair``); return the findings.

    Args:
        databases: service name -> database name, for every name in :data:`SERVICES`.
        threshold: minimum age of a row before it counts as drift; also the window in
            which a close re-issued by an earlier run is not repeated (wall clock).
        now: the time rows' ages are measured against (default: wall clock; tests).
        limit: most cases / sagas examined per check.

    Raises:
        psycopg.OperationalError: the case or saga database is unreachable.
    """
    now = now or datetime.now(UTC)
    older_than = now - threshold
    findings: list[Finding] = []
    made: list[_SagaRepairs] = []

    def repairs() -> _SagaRepairs:
        if not made:
            made.append(_SagaRepairs(registry_url))
        return made[0]

    try:
        with _connect(_dsn(pg_url, databases["case"])) as case_conn, \
                _connect(_dsn(pg_url, databases["saga"])) as saga_conn:
            findings += _case_saga_drift(
                case_conn, saga_conn, older_than=older_than, repair=repair, limit=limit,
                repairs=repairs, not_since=datetime.now(UTC) - threshold)
    finally:
        for r in made:
            r.close()
    for service in SERVICES:
        try:
            with _connect(_dsn(pg_url, databases[service])) as conn:
                pending, failed, oldest = stale_outbox(conn, older_than=older_than)
        except (psycopg.errors.UndefinedTable, psycopg.OperationalError):
            continue  # no outbox in this service (audit) or database absent
        if pending or failed:
            age = "" if oldest is None else f", oldest {int((now - oldest).total_seconds())} s"
            findings.append(Finding(
                kind="outbox-pending", database=service, subject="outbox",
                detail=f"{pending} pending and {failed} failed row(s) older than "
                       f"{int(threshold.total_seconds())} s{age}: is the relay running? "
                       f"(failed rows: casestream outbox redrive --service {service})"))
    return findings


def _db_option(service: str) -> Any:
    return click.option(f"--{service}-db", f"{service}_db", default=service, show_default=True,
                        envvar=f"CASESTREAM_{service.upper()}_DATABASE",
                        help=f"Database of the {service} service (CASESTREAM_{service.upper()}_DATABASE).")


@click.command("reconcile")
@click.option("--threshold-s", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="Only rows older than this count as drift (seconds).")
@click.option("--repair/--dry-run", default=False, show_default=True,
              help="Repair what can be repaired (default: report only).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Most cases / sagas examined per check.")
@click.option("--pg-url", envvar="CASESTREAM_PG_URL", default="postgresql://postgres@127.0.0.1:15432",
              show_default=True, help="PostgreSQL server URL without database (CASESTREAM_PG_URL).")
@click.option("--registry", "registry_url", envvar="CASESTREAM_REGISTRY_URL", default=None,
              help="Schema registry (repairs only; CASESTREAM_REGISTRY_URL).")
@_db_option("case")
@_db_option("saga")
@_db_option("decision")
@_db_option("notification")
@_db_option("audit")
def reconcile(threshold_s: float, repair: bool, as_json: bool, limit: int, pg_url: str,
              registry_url: str | None, **dbs: str) -> None:
    """Find (and with --repair fix) drift: submitted cases without a saga, completed sagas
    whose case is not closed, outbox rows pending too long. Exit 1 if drift remains."""
    databases = {s: dbs[f"{s}_db"] for s in SERVICES}
    try:
        findings = run_reconcile(pg_url=pg_url, databases=databases, repair=repair,
                                 threshold=timedelta(seconds=threshold_s),
                                 registry_url=registry_url, limit=limit)
    except psycopg.OperationalError as e:
        raise click.ClickException(f"cannot reach the case or saga database: {e}") from e
    except psycopg.ProgrammingError as e:  # a malformed URL or database name
        raise click.ClickException(f"bad database URL (--pg-url / CASESTREAM_PG_URL): "
                                   f"{str(e).strip()}") from None
    _print(findings, as_json=as_json)
    if any(not f.repaired for f in findings):
        raise SystemExit(1)


def _print(findings: Sequence[Finding], *, as_json: bool) -> None:
    for f in findings:
        if as_json:
            click.echo(json.dumps(asdict(f)))
        else:
            mark = "repaired" if f.repaired else "DRIFT"
            click.echo(f"{mark:8} {f.kind:26} {f.database:12} {f.subject}  {f.detail}")
    if not as_json:
        left = sum(not f.repaired for f in findings)
        click.echo(f"{len(findings)} finding(s), {len(findings) - left} repaired, {left} left")
