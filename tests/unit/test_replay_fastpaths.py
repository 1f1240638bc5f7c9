"""Unit tests of the replay's fast paths: the inline guard verdicts of ``ReplayApplier.decide``
against ``casestream.handlers.guard.decide``, the jsonb rewrite of batch statements, the relaxed GC
threshold, and the replay registrations of the dashboard and statistics projections."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from casestream.handlers.guard import FirstSeenPolicy, Verdict, decide
from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.events.envelope import Envelope
from casestream.replay.applier import ReplayApplier
from casestream.replay.engine import relaxed_gc
from casestream.replay.progress import Progress
from casestream.replay.projection import load_projection
from tests.unit.test_replay_unit import ev, pos


def _reference(items: list[Any], guard: dict[Any, int], policy: FirstSeenPolicy,
               handled: set[str]) -> tuple[list[list[int]], dict[Any, int], tuple[int, ...]]:
    """The verdicts spelled out with ``guard.decide`` for every event (the rule's source)."""
    changed: dict[Any, int] = {}
    runs: list[list[int]] = []
    applied = stale = gaps = unhandled = 0
    for _pos, e in items:
        key = (e.aggregate_type, e.aggregate_id)
        last = changed.get(key, guard.get(key))
        verdict = decide(last, e.aggregate_version, policy)
        if verdict is Verdict.STALE:
            stale += 1
            continue
        gaps += verdict is Verdict.GAP
        changed[key] = e.aggregate_version
        if e.event_type not in handled:
            unhandled += 1
            continue
        applied += 1
        if runs:  # skipped and unhandled events do not end a run
            runs[-1].append(e.aggregate_version)
        else:
            runs.append([e.aggregate_version])
    return runs, changed, (applied, stale, gaps, unhandled)


@pytest.mark.parametrize("policy", list(FirstSeenPolicy))
def test_inline_verdicts_equal_guard_decide(policy: FirstSeenPolicy) -> None:
    rnd = random.Random(policy.value)
    reg = HandlerRegistry()

    def project(ctx: Any, events: Any) -> None:
        pass

    reg.add_batch("CaseOpened", project, kind=HandlerKind.PROJECTION)  # one run key for both
    reg.add_batch("CaseClosed", project, kind=HandlerKind.PROJECTION)
    for _ in range(200):
        guard = {("case", a): rnd.randint(1, 4) for a in "AB" if rnd.random() < 0.5}
        items = [(pos(i), ev(rnd.choice(["CaseOpened", "CaseClosed", "CaseNoted"]),
                             rnd.choice("ABC"), rnd.randint(1, 6))) for i in range(rnd.randint(0, 12))]
        a = ReplayApplier(consumer="replay:x", handlers=reg, first_seen=policy, guard=dict(guard))
        p = Progress()
        planned = a.decide(items, p)
        runs, changed, counts = _reference(items, guard, policy, {"CaseOpened", "CaseClosed"})
        assert [[e.aggregate_version for _p, e in run] for _hs, run in planned.runs] == runs
        assert planned.changed == changed and planned.applied == counts[0]
        assert (p.applied, p.stale, p.gaps, p.unhandled) == counts
        assert a.guard == guard  # decide never touches the guard


def test_batch_statements_read_their_rows_as_jsonb() -> None:
    """On ``json`` every ``r->>k`` re-parses the row text (bench/README.md "Replay"); the live
    projections and their replays share the statement, so both must read ``jsonb``."""
    from services.audit.adapters import replay as audit_replay
    from services.case.adapters import dashboard
    from services.decision.adapters import statistics

    assert "jsonb_array_elements(%s::jsonb)" in dashboard._UPSERT and "::json)" not in dashboard._UPSERT
    for registry in (statistics.registry, audit_replay.batch_registry):  # insert_batch_registry
        stmt = _live_statement(registry)
        assert "jsonb_array_elements(%s::jsonb)" in stmt and "::json)" not in stmt
    assert load_projection("case.dashboard") is dashboard.PROJECTION
    assert load_projection("decision.statistics") is statistics.PROJECTION
    assert load_projection("audit.timeline") is audit_replay.PROJECTION


def _live_statement(registry: Any) -> str:
    """The SQL the first handler of ``registry(names)`` runs for a live batch of one event."""
    from types import SimpleNamespace

    from casestream.handlers.processing import ProcessingMode
    from services.audit.adapters.projection import LIVE_TIMELINE
    from services.decision.adapters.statistics import TABLE

    class Conn:
        ran: list[str] = []

        def execute(self, statement: Any, params: Any = None) -> None:
            self.ran.append(statement.as_string(None))

    handlers = registry({TABLE: TABLE, LIVE_TIMELINE: LIVE_TIMELINE}, ["ViolationDetermined"])
    event = Envelope(event_id="6f1c1a4e-8a42-4d3e-9a55-0c0e5f0b9d11", event_type="ViolationDetermined", event_version=1,
                     source="decision", tenant_id="t1", aggregate_type="decision",
                     aggregate_id="d-1", aggregate_version=1,
                     occurred_at=datetime(2026, 3, 1, tzinfo=UTC), correlation_id="c-1",
                     actor_id="officer-7", payload={"case_id": "c-1", "saga_id": "s-1",
                                                    "violation_code": "W-12",
                                                    "penalty_cents": 2500})
    conn = Conn()
    handlers.handlers_for(event.event_type, ProcessingMode.LIVE)[0].fn(
        SimpleNamespace(conn=conn, mode=ProcessingMode.LIVE), [event])
    return conn.ran[0]


def test_relaxed_gc_raises_the_young_threshold_and_restores_it() -> None:
    before = gc.get_threshold()
    with relaxed_gc(123_456):
        assert gc.get_threshold() == (max(123_456, before[0]), *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), relaxed_gc(50_000):
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
