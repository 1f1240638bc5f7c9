"""Support for the replay integration tests (no tests here): event history, per-test database,
specs pointed at private topics, a live projection consumer, and a subprocess replay runner.

Run as a script (the SIGKILL test)::

    python tests/integration/test_replay_support.py --projection case.dashboard --dsn DSN \
        --bootstrap B --topic T --consumer C [--registry-url U] --batch-size N --slow-ms MS \
        [--workers N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from casestream.events.envelope import Envelope
from services import schemas_dir

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def env(event_type: str, agg_type: str, agg_id: str, version: int, payload: dict[str, Any], *,
        tenant: str, at: datetime, event_version: int | None = None,
        source: str | None = None) -> Envelope:
    """An envelope for the history (correlation = case id)."""
    return Envelope(event_id=str(uuid.uuid4()), event_type=event_type, event_version=event_version,
                    source=source or agg_type, tenant_id=tenant, aggregate_type=agg_type,
                    aggregate_id=agg_id, aggregate_version=version, occurred_at=at,
                    correlation_id=agg_id, actor_id="officer-7", payload=payload)


def opened(case_id: str, tenant: str, at: datetime, schema: int, severity: int = 3) -> Envelope:
    """CaseOpened in schema version ``schema`` (1..3): upcasters bring it to v3 on decode."""
    p: dict[str, Any] = {"title": f"case {case_id[:8]}", "severity": severity,
                         "evidence_count": 2, "reporter_email": "r@example.org"}
    if schema == 3:
        p |= {"summary": "barrels   behind\n the depot", "priority": "HIGH"}
    else:
        p["description"] = "barrels   behind\n the depot"
        if schema == 2:
            p["priority"] = "LOW"
    return env("CaseOpened", "case", case_id, 1, p, tenant=tenant, at=at, event_version=schema)


def journey(i: int, *, tenant: str | None = None, start: datetime = T0
            ) -> tuple[list[Envelope], list[Envelope]]:
    """Case ``i``'s events: (case topic events, decision topic events).

    i % 4: 0 closed with violation, 1 closed without, 2 returned, 3 left submitted.
    CaseOpened schema version cycles v1, v2, v3.
    """
    cid = str(uuid.uuid4())
    tenant = tenant or f"tenant-{i % 3}"
    at = start + timedelta(hours=i)
    sev = 1 + i % 5
    case = [opened(cid, tenant, at, 1 + i % 3, sev),
            env("CaseSubmitted", "case", cid, 2,
                {"title": f"case {cid[:8]}", "severity": sev, "evidence_count": 2,
                 "reporter_email": "r@example.org", "submitted_by": "officer-7"},
                tenant=tenant, at=at + timedelta(minutes=1))]
    decision: list[Envelope] = []
    saga = str(uuid.uuid4())
    kind = i % 4
    if kind == 0:
        decision.append(env("ViolationDetermined", "decision", cid, 1,
                            {"case_id": cid, "saga_id": saga, "violation_code": f"V{sev}",
                             "penalty_cents": 1000 * sev}, tenant=tenant,
                            at=at + timedelta(minutes=2)))
        case.append(env("CaseClosed", "case", cid, 3, {"outcome": "violation",
                                                       "penalty_cents": 1000 * sev},
                        tenant=tenant, at=at + timedelta(minutes=3)))
    elif kind == 1:
        decision.append(env("NoViolationFound", "decision", cid, 1,
                            {"case_id": cid, "saga_id": saga}, tenant=tenant,
                            at=at + timedelta(minutes=2)))
        case.append(env("CaseClosed", "case", cid, 3, {"outcome": "no_violation",
                                                       "penalty_cents": None},
                        tenant=tenant, at=at + timedelta(minutes=3)))
    elif kind == 2:
        decision.append(env("DecisionFailed", "decision", cid, 1,
                            {"case_id": cid, "saga_id": saga, "reason": "rules unavailable"},
                            tenant=tenant, at=at + timedelta(minutes=2)))
        case.append(env("CaseReturned", "case", cid, 3, {"reason": "incomplete"},
                        tenant=tenant, at=at + timedelta(minutes=3)))
    return case, decision


def history(n: int, first: int = 0) -> tuple[list[Envelope], list[Envelope]]:
    """Journeys ``first .. first+n-1``: (case events, decision events)."""
    cases: list[Envelope] = []
    decisions: list[Envelope] = []
    for i in range(first, first + n):
        c, d = journey(i)
        cases += c
        decisions += d
    return cases, decisions


@contextmanager
def private_database(pg_url: str, prefix: str = "replay") -> Iterator[str]:
    """A fresh database for one test (dropped afterwards); yields its DSN."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    base = pg_url.rstrip("/") + "/postgres"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url.rstrip("/") + "/" + name
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def private_spec(spec: Any, topics: Sequence[str], dsn: str, consumer: str) -> Any:
    """``spec`` reading ``topics`` into the database ``dsn``, live consumer ``consumer``."""
    return dataclasses.replace(spec, topics=tuple(topics), dsn=lambda: dsn,
                               live_consumer=consumer)


def live_runtime(spec: Any, codec: Any, pool: Any, bootstrap: str, *, batch_size: int = 50,
                 registry: Any = None) -> Any:
    """The live consumer of ``spec`` (LIVE mode, writing the live tables)."""
    from casestream.events.catalog import load_catalog
    from casestream.consumer import ConsumerRuntime, ConsumerSettings

    reg = registry or spec.registry(spec.live_names(), load_catalog(schemas_dir()).event_types)
    return ConsumerRuntime(spec.live_consumer, list(spec.topics), reg, codec, pool,
                           {"bootstrap.servers": bootstrap},
                           ConsumerSettings(batch_size=batch_size, poll_timeout_s=0.1,
                                            ensure_topics=False))


def table_rows(dsn: str, table: str, order: str, exclude: Sequence[str] = ("applied_at",)
               ) -> list[tuple[Any, ...]]:
    """Every row of ``table`` without the ``exclude`` columns, ordered by ``order``."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        cols = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position", (table,)).fetchall() if r[0] not in exclude]
        return conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall()


def main(argv: Sequence[str] | None = None) -> int:
    """Subprocess replay with an optional per-batch delay (so a test can SIGKILL it mid-way)."""
    import time

    from casestream.events.catalog import load_catalog
    from casestream.testing.consumer import real_codec
    from casestream.handlers.registry import HandlerKind
    from casestream.replay import ReplayOptions, Replayer, load_projection

    ap = argparse.ArgumentParser()
    ap.add_argument("--projection", required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", action="append", required=True)
    ap.add_argument("--consumer", required=True)
    ap.add_argument("--registry-url")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--slow-ms", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args(argv)
    spec = private_spec(load_projection(a.projection), a.topic, a.dsn, a.consumer)
    base_registry = spec.registry

    def slow_registry(names: Any, types: Any) -> Any:
        reg = base_registry(names, types)
        if a.slow_ms:
            def pause(ctx: Any, events: Any) -> None:
                time.sleep(a.slow_ms / 1000)
            for t in sorted(reg.event_types):
                reg.add_batch(t, pause, kind=HandlerKind.PROJECTION)
        return reg

    spec = dataclasses.replace(spec, registry=slow_registry)
    codec = real_codec(a.registry_url, fallback=a.registry_url is None)
    r = Replayer(spec, codec=codec, dsn=a.dsn, bootstrap=a.bootstrap,
                 event_types=load_catalog(schemas_dir()).event_types)
    r.run(ReplayOptions(batch_size=a.batch_size, workers=a.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
