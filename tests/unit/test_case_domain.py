"""Unit tests of the case aggregate and value objects (services.case.domain)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.case.domain import (
    Case,
    CaseClosed,
    CaseContent,
    CaseOpened,
    CaseReturned,
    CaseStatus,
    CaseSubmitted,
    CaseValidationError,
    InvalidTransition,
    Outcome,
    Priority,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def content(**overrides: object) -> CaseContent:
    fields: dict[str, object] = dict(title="Unlicensed trading", summary="Seen at the market",
                                     severity=3, evidence_count=2,
                                     reporter_email="inspector@example.org")
    fields.update(overrides)
    return CaseContent(**fields)  # type: ignore[arg-type]


def opened(**overrides: object) -> Case:
    return Case.open(case_id="c-1", tenant_id="t-1", content=content(**overrides),
                     actor_id="officer", at=T0)


def submitted() -> Case:
    case = opened()
    case.submit(actor_id="officer", at=T0 + timedelta(seconds=1))
    case.pull_events()
    return case


class TestContent:
    def test_trims_and_defaults_priority(self) -> None:
        c = content(title="  Title  ", summary=" s ", reporter_email=" a@b.org ")
        assert (c.title, c.summary, c.reporter_email, c.priority) == ("Title", "s", "a@b.org",
                                                                       Priority.NORMAL)

    @pytest.mark.parametrize(("field", "value"), [
        ("title", ""), ("title", "   "), ("title", "x" * 201),
        ("summary", ""), ("summary", "x" * 501),
        ("severity", 0), ("severity", 6), ("severity", True), ("severity", "3"),
        ("evidence_count", -1), ("evidence_count", 2**31), ("evidence_count", 1.5),
        ("reporter_email", "not-an-email"), ("reporter_email", "a@b"), ("reporter_email", ""),
        ("priority", "URGENT"),
    ])
    def test_rejects_bad_values_naming_the_field(self, field: str, value: object) -> None:
        with pytest.raises(CaseValidationError) as err:
            content(**{field: value})
        assert err.value.field == field

    def test_accepts_limits(self) -> None:
        c = content(title="x" * 200, summary="y" * 500, severity=5, evidence_count=2**31 - 1,
                    priority="HIGH")
        assert c.priority is Priority.HIGH and len(c.summary) == 500


class TestLifecycle:
    def test_open_records_case_opened_at_version_1(self) -> None:
        case = opened()
        assert case.status is CaseStatus.OPEN and case.version == 1 and case.loaded_version == 0
        [event] = case.pull_events()
        assert isinstance(event, CaseOpened)
        assert (event.case_id, event.tenant_id, event.version, event.actor_id) == ("c-1", "t-1", 1,
                                                                                   "officer")
        assert case.pull_events() == []

    def test_submit_moves_to_submitted_and_records_event(self) -> None:
        case = opened()
        case.pull_events()
        case.submit(actor_id="clerk", at=T0 + timedelta(seconds=5), note="  urgent ")
        [event] = case.pull_events()
        assert isinstance(event, CaseSubmitted)
        assert event.version == 2 and event.actor_id == "clerk" and event.note == "urgent"
        assert case.status is CaseStatus.SUBMITTED and case.submitted_by == "clerk"
        assert case.updated_at == T0 + timedelta(seconds=5)

    def test_submit_twice_is_invalid(self) -> None:
        case = submitted()
        with pytest.raises(InvalidTransition) as err:
            case.submit(actor_id="x", at=T0)
        assert err.value.status == "submitted" and err.value.action == "submit"
        assert case.pending_events == ()

    def test_close_violation_with_penalty(self) -> None:
        case = submitted()
        assert case.close(outcome="violation", penalty_cents=12_500, actor_id="saga", at=T0)
        [event] = case.pull_events()
        assert isinstance(event, CaseClosed)
        assert (event.outcome, event.penalty_cents, event.version) == (Outcome.VIOLATION, 12_500, 3)
        assert case.status is CaseStatus.CLOSED and case.status.is_final

    def test_close_no_violation_normalises_zero_penalty(self) -> None:
        case = submitted()
        case.close(outcome="no_violation", penalty_cents=0, actor_id="saga", at=T0)
        [event] = case.pull_events()
        assert isinstance(event, CaseClosed) and event.penalty_cents is None

    @pytest.mark.parametrize(("outcome", "penalty", "field"), [
        ("violation", None, "penalty_cents"), ("violation", -1, "penalty_cents"),
        ("no_violation", 100, "penalty_cents"), ("maybe", None, "outcome"),
    ])
    def test_close_rejects_bad_resolution(self, outcome: str, penalty: int | None,
                                          field: str) -> None:
        case = submitted()
        with pytest.raises(CaseValidationError) as err:
            case.close(outcome=outcome, penalty_cents=penalty, actor_id="saga", at=T0)
        assert err.value.field == field
        assert case.status is CaseStatus.SUBMITTED and case.version == 2

    def test_repeated_identical_close_is_a_no_op(self) -> None:
        case = submitted()
        case.close(outcome="violation", penalty_cents=100, actor_id="saga", at=T0)
        case.pull_events()
        assert case.close(outcome="violation", penalty_cents=100, actor_id="saga", at=T0) is False
        assert case.pending_events == () and case.version == 3

    def test_close_with_other_outcome_after_close_is_invalid(self) -> None:
        case = submitted()
        case.close(outcome="violation", penalty_cents=100, actor_id="saga", at=T0)
        with pytest.raises(InvalidTransition):
            case.close(outcome="no_violation", penalty_cents=None, actor_id="saga", at=T0)

    def test_close_an_open_case_is_invalid(self) -> None:
        with pytest.raises(InvalidTransition):
            opened().close(outcome="no_violation", penalty_cents=None, actor_id="saga", at=T0)

    def test_return_records_reason_and_is_final(self) -> None:
        case = submitted()
        assert case.return_(reason=" decision failed ", actor_id="saga", at=T0)
        [event] = case.pull_events()
        assert isinstance(event, CaseReturned) and event.reason == "decision failed"
        assert case.status is CaseStatus.RETURNED and case.version == 3
        assert case.return_(reason="again", actor_id="saga", at=T0) is False
        with pytest.raises(InvalidTransition):
            case.submit(actor_id="x", at=T0)  # a returned case is final in this version
        with pytest.raises(InvalidTransition):
            case.close(outcome="no_violation", penalty_cents=None, actor_id="saga", at=T0)

    def test_return_of_closed_case_is_invalid(self) -> None:
        case = submitted()
        case.close(outcome="no_violation", penalty_cents=None, actor_id="saga", at=T0)
        with pytest.raises(InvalidTransition):
            case.return_(reason="late", actor_id="saga", at=T0)

    def test_return_needs_a_reason(self) -> None:
        with pytest.raises(CaseValidationError):
            submitted().return_(reason="  ", actor_id="saga", at=T0)

    def test_note_limit(self) -> None:
        case = opened()
        with pytest.raises(CaseValidationError) as err:
            case.submit(actor_id="x", at=T0, note="n" * 1001)
        assert err.value.field == "note" and case.status is CaseStatus.OPEN
