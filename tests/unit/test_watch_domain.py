"""Unit tests of the watch example's domain (pure rules) and its upcaster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from casestream.events import InMemoryRegistry, load_catalog, new_event, open_codec
from services import schemas_dir
from watch import SCHEMAS
from watch.domain import CaseView, Watch, apply_case_event, is_final, trigger_for, watch_id
from watch.upcasters import chain, watch_triggered_v1_v2

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def view(version: int = 1, state: str = "open", title: str = "t") -> CaseView:
    return CaseView(case_id="c1", tenant_id="tenant-a", state=state, title=title,
                    aggregate_version=version, updated_at=T0)


def apply(v: CaseView | None, event_type: str, version: int, **payload: object) -> CaseView | None:
    return apply_case_event(v, event_type=event_type, case_id="c1", tenant_id="tenant-a",
                            aggregate_version=version, occurred_at=T0 + timedelta(seconds=version),
                            payload=payload)


class TestProjectionRule:
    def test_each_case_event_sets_its_state(self) -> None:
        v = apply(None, "CaseOpened", 1, title="Leak")
        assert v is not None and (v.state, v.title, v.aggregate_version) == ("open", "Leak", 1)
        for n, (event_type, state) in enumerate(
                [("CaseSubmitted", "submitted"), ("CaseReturned", "returned"),
                 ("CaseSubmitted", "submitted"), ("CaseClosed", "closed")], start=2):
            v = apply(v, event_type, n)
            assert v is not None and (v.state, v.aggregate_version) == (state, n)
        assert v.title == "Leak" and v.updated_at == T0 + timedelta(seconds=5)

    def test_an_event_not_newer_than_the_view_changes_nothing(self) -> None:
        current = view(version=3, state="submitted")
        assert apply(current, "CaseClosed", 3) is current
        assert apply(current, "CaseOpened", 1) is current

    def test_other_event_types_change_nothing(self) -> None:
        assert apply(None, "CaseAssigned", 1) is None
        assert apply(view(), "SagaCompleted", 2) == view()


class TestTriggerRule:
    watch = Watch(case_id="c1", tenant_id="tenant-a", watcher_id="officer-1", created_at=T0)

    def test_closed_triggers_a_final_watch_event(self) -> None:
        fired = trigger_for(self.watch, event_type="CaseClosed", payload={"outcome": "violation"})
        assert fired is not None and fired.watch.version == 1
        assert dict(fired.payload) == {"case_id": "c1", "watcher_id": "officer-1",
                                       "trigger": "CaseClosed", "detail": "violation",
                                       "final": True}

    def test_returned_triggers_a_non_final_one(self) -> None:
        fired = trigger_for(self.watch, event_type="CaseReturned", payload={"reason": "no data"})
        assert fired is not None and fired.payload["detail"] == "no data"
        assert fired.payload["final"] is False

    @pytest.mark.parametrize("event_type", ["CaseOpened", "CaseSubmitted", "Other"])
    def test_other_events_trigger_nothing(self, event_type: str) -> None:
        assert trigger_for(self.watch, event_type=event_type, payload={}) is None

    def test_watch_id(self) -> None:
        assert self.watch.id == watch_id("c1", "officer-1") == "c1/officer-1"
        assert is_final("CaseClosed") and not is_final("CaseReturned")


class TestUpcaster:
    def test_v1_to_v2_derives_final_from_the_trigger(self) -> None:
        v1 = {"case_id": "c", "watcher_id": "w", "trigger": "CaseClosed", "detail": "x"}
        assert watch_triggered_v1_v2(v1) == {**v1, "final": True}
        assert watch_triggered_v1_v2({**v1, "trigger": "CaseReturned"})["final"] is False

    def test_the_chain_covers_the_catalog(self) -> None:
        chain().verify(load_catalog(SCHEMAS))

    def test_the_catalog_names_the_chain_and_merges_with_the_suites(self) -> None:
        merged = load_catalog(schemas_dir(), SCHEMAS)
        assert {"CaseClosed", "WatchTriggered"} <= set(merged.event_types)
        assert merged.subject_for("WatchTriggered").subject == "acme.watch.WatchTriggered"
        steps = merged.upcaster_chain().steps()
        assert ("WatchTriggered", 1) in steps and ("CaseOpened", 1) in steps

    def test_a_v1_event_on_the_wire_decodes_as_v2(self) -> None:
        catalog = load_catalog(SCHEMAS)
        with open_codec(catalog, InMemoryRegistry(), auto_register=True) as codec:
            event = new_event(
                event_type="WatchTriggered", event_version=1, aggregate_type="watch",
                aggregate_id="c/w", aggregate_version=1, tenant_id="tenant-a", source="watch",
                actor_id="watch", correlation_id="c",
                payload={"case_id": "c", "watcher_id": "w", "trigger": "CaseClosed",
                         "detail": "violation"})
            decoded = codec.decode(codec.encode(event))
        assert decoded.event_version == 2
        assert decoded.payload["final"] is True and decoded.payload["detail"] == "violation"
        assert codec.topic_for(event) == "outbox.event.watch"
