"""Unit tests of the replay package: options parsing, progress lines, REPLAY dispatch and the
version guard of the applier, start-up checks, and the pure parts of the new projections."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from casestream.events.envelope import Envelope
from casestream.handlers.registry import HandlerKind, HandlerRegistry, RegisteredHandler
from casestream.handlers.processing import ProcessingMode
from casestream.replay import (
    ReplayConfigError,
    ReplayHandlerError,
    ReplayOptions,
    load_projection,
    parse_from,
    parse_to,
    replay_handlers,
)
from casestream.replay.applier import ReplayApplier
from casestream.replay.progress import Progress, ProgressReporter, fmt_eta, render

AT = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def ev(event_type: str, agg: str, version: int, payload: dict[str, Any] | None = None, *,
       agg_type: str = "case", tenant: str = "t1", at: datetime = AT) -> Envelope:
    return Envelope(event_id=str(uuid.uuid4()), event_type=event_type, event_version=1,
                    source=agg_type, tenant_id=tenant, aggregate_type=agg_type, aggregate_id=agg,
                    aggregate_version=version, occurred_at=at, correlation_id=agg,
                    actor_id="a", payload=payload or {})


def pos(i: int) -> tuple[str, int, int]:
    return ("t", 0, i)


# ------------------------------------------------------------------ options

def test_from_earliest_time_and_offsets() -> None:
    assert parse_from(None).earliest and parse_from("earliest").text() == "earliest"
    t = parse_from("2026-11-30T06:00:00Z")
    assert t.at == AT and not t.earliest
    assert parse_from("2026-11-30T07:00:00+01:00").at == AT
    assert parse_from("2026-11-30").at == datetime(2026, 11, 30, tzinfo=UTC)
    o = parse_from("outbox.event.case:0:15,outbox.event.case:2:7", ("outbox.event.case",))
    assert o.offsets == {("outbox.event.case", 0): 15, ("outbox.event.case", 2): 7}
    assert o.text() == "outbox.event.case:0:15,outbox.event.case:2:7"


@pytest.mark.parametrize("bad", ["yesterday", "t:x:1", "t:0:-1", "other:0:1", "t:1"])
def test_bad_from_is_a_config_error(bad: str) -> None:
    with pytest.raises(ReplayConfigError):
        parse_from(bad, ("t",))


def test_to_now_or_time() -> None:
    assert parse_to("now").now and parse_to(None).text() == "now"
    assert parse_to("2026-11-30T06:00:00Z").until == AT
    with pytest.raises(ReplayConfigError):
        parse_to("soon")
    with pytest.raises(ReplayConfigError):
        ReplayOptions(batch_size=0)


# ------------------------------------------------------------------ progress

def test_progress_line_has_done_rate_lag_eta() -> None:
    p = Progress(read=20000, applied=19990, stale=10, lag=40000, started=100.0)
    line = render("audit.timeline", p, 110.0)
    assert "20000 events" in line and "2,000 events/s" in line and "lag 40000" in line
    assert "ETA 20s" in line
    assert fmt_eta(None) == "?" and fmt_eta(125) == "2m05s" and fmt_eta(3725) == "1h02m"


def test_progress_in_place_on_a_terminal_and_plain_lines_otherwise() -> None:
    clock = iter([1.0, 1.1, 5.0, 5.1]).__next__
    tty = io.StringIO()
    r = ProgressReporter("x", tty, tty=True, clock=clock)
    r.update(Progress(read=1, started=0.0))
    r.update(Progress(read=2, started=0.0))  # within 0.2 s: skipped
    r.update(Progress(read=3, started=0.0))
    r.message("done")
    out = tty.getvalue()
    assert out.startswith("\r") and out.count("\r") == 2 and out.endswith("\ndone\n")
    plain = io.StringIO()
    clock2 = iter([10.0, 11.0, 13.0]).__next__
    r2 = ProgressReporter("x", plain, tty=False, interval_s=2.0, clock=clock2)
    for n in (1, 2, 3):
        r2.update(Progress(read=n, started=0.0))
    lines = plain.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in plain.getvalue()


# ------------------------------------------------------------------ REPLAY dispatch

class Conn:
    """Stands in for the connection: handlers here only record calls."""


def _registry(calls: list[Any]) -> HandlerRegistry:
    reg = HandlerRegistry()

    def project(ctx: Any, events: Any) -> None:
        assert ctx.mode is ProcessingMode.REPLAY
        calls.append(("project", [e.aggregate_version for e in events], ctx.positions))

    def mail(ctx: Any, event: Any) -> None:
        calls.append(("mail", event.event_id))

    def saga(ctx: Any, event: Any) -> None:
        calls.append(("saga", event.event_id))
        ctx.outbox.append(ctx.conn, [event])

    for t in ("CaseOpened", "CaseSubmitted", "CaseClosed"):
        reg.add_batch(t, project, kind=HandlerKind.PROJECTION)
    reg.add("CaseClosed", mail, kind=HandlerKind.SIDE_EFFECT)
    reg.add("CaseSubmitted", saga, kind=HandlerKind.PROCESS)
    return reg


def test_replay_runs_projection_handlers_only_in_runs() -> None:
    calls: list[Any] = []
    a = ReplayApplier(consumer="replay:x", handlers=_registry(calls))
    items = [(pos(0), ev("CaseOpened", "A", 1)), (pos(1), ev("CaseSubmitted", "A", 2)),
             (pos(2), ev("CaseClosed", "A", 3)), (pos(3), ev("CaseReturned", "A", 4))]
    p = Progress()
    changed = a.apply(Conn(), items, p)
    # one run for the three types sharing the batch handler; CaseReturned has no handler
    assert calls == [("project", [1, 2, 3], (pos(0), pos(1), pos(2)))]
    assert (p.applied, p.unhandled, p.stale) == (3, 1, 0) and a.outbox.discarded == 0
    assert changed == {("case", "A"): 4} and a.guard == {}
    a.commit(changed)
    assert a.guard == {("case", "A"): 4}


def test_guard_skips_duplicates_and_applies_across_gaps_counting_them() -> None:
    calls: list[Any] = []
    a = ReplayApplier(consumer="replay:x", handlers=_registry(calls), guard={("case", "A"): 1})
    e2 = ev("CaseSubmitted", "A", 2)
    items = [(pos(0), ev("CaseOpened", "A", 1)),   # stale (already applied before a resume)
             (pos(1), e2), (pos(2), e2),          # relay re-publish: the copy is stale
             (pos(3), ev("CaseOpened", "B", 2)),   # first seen at v2: a gap under STRICT
             ]
    from casestream.handlers.guard import FirstSeenPolicy

    a.first_seen = FirstSeenPolicy.STRICT
    p = Progress()
    a.apply(Conn(), items, p)
    assert (p.applied, p.stale, p.gaps) == (2, 2, 1)
    assert calls == [("project", [2, 2], (pos(1), pos(3)))]


def test_handler_failure_names_the_position() -> None:
    reg = HandlerRegistry()

    def boom(ctx: Any, event: Any) -> None:
        raise RuntimeError("bad row")

    reg.add("CaseOpened", boom, kind=HandlerKind.PROJECTION)
    a = ReplayApplier(consumer="replay:x", handlers=reg)
    with pytest.raises(ReplayHandlerError, match=r"t\[0\]@7") as err:
        a.apply(Conn(), [(pos(7), ev("CaseOpened", "A", 1))], Progress())
    assert err.value.position == pos(7) and a.guard == {}


def test_undeclared_handler_kind_is_a_start_up_error() -> None:
    reg = _registry([])
    reg._by_type["CaseOpened"].append(  # what a registration bypassing `on(kind=...)` leaves
        RegisteredHandler("CaseOpened", None, lambda c, e: None))  # type: ignore[arg-type]
    with pytest.raises(ReplayConfigError, match="declares no handler kind"):
        replay_handlers(reg, "x")


def test_a_registry_without_projection_handlers_is_refused() -> None:
    reg = HandlerRegistry()
    reg.add("CaseClosed", lambda c, e: None, kind=HandlerKind.SIDE_EFFECT)
    with pytest.raises(ReplayConfigError, match="no PROJECTION handler"):
        replay_handlers(reg, "x")


def test_projections_are_known_by_name() -> None:
    for name in ("audit.timeline", "case.dashboard", "decision.statistics"):
        spec = load_projection(name)
        assert spec.name == name and spec.topics and spec.tables
        replay_handlers(spec.registry(spec.shadow_names(), ()), name)
    with pytest.raises(ReplayConfigError, match="unknown projection"):
        load_projection("nope")


# ------------------------------------------------------------------ projections (pure parts)

def test_dashboard_fold_keeps_the_state_after_the_last_event_per_case() -> None:
    from services.case.adapters.dashboard import fold

    rows = fold([
        ev("CaseOpened", "A", 1, {"severity": 4, "priority": "HIGH"}),
        ev("CaseOpened", "B", 1, {"severity": 2, "priority": "NORMAL"}, tenant="t2"),
        ev("CaseSubmitted", "A", 2, {"severity": 5}, at=AT + timedelta(minutes=1)),
        ev("CaseClosed", "A", 3, {"outcome": "violation"}, at=AT + timedelta(minutes=2)),
        ev("CaseRetitled", "A", 4),  # unknown type: ignored by the fold
        ev("CaseAssigned", "B", 2, {"officer_id": "o-1"}, tenant="t2"),  # keeps the status
    ])
    assert rows == [
        ("A", "t1", "closed", 5, "HIGH", "violation", AT, AT + timedelta(minutes=2),
         "CaseClosed", 3, None, None, None, None),
        ("B", "t2", "open", 2, "NORMAL", None, AT, AT, "CaseAssigned", 2, "o-1", None, None, None),
    ]


def test_dashboard_fold_carries_officer_evidence_penalty_and_appeal() -> None:
    from services.case.adapters.dashboard import fold

    rows = fold([
        ev("CaseAssigned", "A", 2, {"officer_id": "o-1"}),
        ev("EvidenceRequested", "A", 3, {"due_at": AT}),
        ev("CaseClosed", "A", 4, {"outcome": "violation", "penalty_cents": 5000}),
        ev("AppealSubmitted", "A", 5, {"reason": "r"}),
        ev("CaseClosed", "A", 6, {"outcome": "violation", "penalty_cents": 2500}),
    ])
    assert rows[0][2] == "closed" and rows[0][10:] == ("o-1", "requested", 2500, "decided")


def test_statistics_fact_per_decision_event() -> None:
    from services.decision.adapters.statistics import fact

    late = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    v = ev("ViolationDetermined", "C", 1, {"case_id": "C", "saga_id": "S",
                                           "violation_code": "V1", "penalty_cents": 2500},
           agg_type="decision", at=late)
    assert fact(v)[1:] == ("t1", "C", "violation", "V1", 2500, late, late.date())
    n = ev("NoViolationFound", "C", 2, {"case_id": "C", "saga_id": "S"}, agg_type="decision")
    assert fact(n)[3:6] == ("no_violation", None, 0)
    assert fact(ev("DecisionRequested", "C", 1)) is None
