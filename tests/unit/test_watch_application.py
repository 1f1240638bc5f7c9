"""Unit tests of the watch example's use cases, consumer registries and HTTP API over the
in-memory adapters (``watch.adapters.memory``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from casestream.auth import AuthSettings, TokenVerifier, bearer_headers
from casestream.handlers import HandlerKind, ProcessingMode
from casestream.events import new_event
from casestream.http import EdgePolicy
from watch import SERVICE
from watch.adapters import projection, triggers
from watch.adapters.http import build_app
from casestream.outbox import MemorySink
from watch.adapters.memory import FixedClock, MemoryWatchRepository
from watch.application import CaseNotWatched, case_watch, on_case_event, watch_case
from watch.domain import CaseView

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def case_event(event_type: str, version: int, case_id: str = "c1", tenant: str = "tenant-a",
               **payload: object):
    return new_event(event_type=event_type, aggregate_type="case", aggregate_id=case_id,
                     aggregate_version=version, payload=payload, tenant_id=tenant,
                     source="case", actor_id="officer-1", correlation_id=case_id,
                     occurred_at=T0)


@pytest.fixture
def repo() -> MemoryWatchRepository:
    return MemoryWatchRepository()


class TestUseCases:
    def test_watching_is_idempotent(self, repo: MemoryWatchRepository) -> None:
        first, created = watch_case(repo, FixedClock(), tenant_id="tenant-a", case_id="c1",
                                    watcher_id="officer-1")
        again, created_again = watch_case(repo, FixedClock(), tenant_id="tenant-a",
                                          case_id="c1", watcher_id="officer-1")
        assert created and not created_again and again == first

    def test_a_case_nobody_watches_and_nobody_projected_is_not_found(
            self, repo: MemoryWatchRepository) -> None:
        with pytest.raises(CaseNotWatched):
            case_watch(repo, tenant_id="tenant-a", case_id="c1")

    def test_another_tenants_case_is_not_seen(self, repo: MemoryWatchRepository) -> None:
        repo.cases["c1"] = CaseView(case_id="c1", tenant_id="tenant-b", state="open", title="",
                                    aggregate_version=1, updated_at=T0)
        with pytest.raises(CaseNotWatched):
            case_watch(repo, tenant_id="tenant-a", case_id="c1")

    def test_closing_a_watched_case_emits_one_event_per_watch(
            self, repo: MemoryWatchRepository) -> None:
        for watcher in ("officer-1", "officer-2"):
            watch_case(repo, FixedClock(), tenant_id="tenant-a", case_id="c1", watcher_id=watcher)
        watch_case(repo, FixedClock(), tenant_id="tenant-b", case_id="c1", watcher_id="other")
        sink = MemorySink()
        closed = case_event("CaseClosed", 4, outcome="violation")
        emitted = on_case_event(repo, sink, closed)
        assert sink.events == emitted and len(emitted) == 2
        for event, watcher in zip(emitted, ("officer-1", "officer-2"), strict=True):
            assert (event.event_type, event.aggregate_type, event.aggregate_id,
                    event.aggregate_version) == ("WatchTriggered", "watch", f"c1/{watcher}", 1)
            assert event.payload == {"case_id": "c1", "watcher_id": watcher,
                                     "trigger": "CaseClosed", "detail": "violation",
                                     "final": True}
            assert (event.tenant_id, event.causation_id, event.correlation_id) == (
                "tenant-a", closed.event_id, "c1")
        returned = on_case_event(repo, MemorySink(), case_event("CaseReturned", 5, reason="r"))
        assert [e.aggregate_version for e in returned] == [2, 2]

    def test_other_case_events_emit_nothing(self, repo: MemoryWatchRepository) -> None:
        watch_case(repo, FixedClock(), tenant_id="tenant-a", case_id="c1", watcher_id="o")
        sink = MemorySink()
        assert on_case_event(repo, sink, case_event("CaseSubmitted", 2)) == []
        assert sink.events == []


class TestRegistries:
    def test_projection_handlers_run_in_replay_triggers_only_live(self) -> None:
        proj = projection.registry(projection.PROJECTION.live_names(),
                                   ["CaseOpened", "CaseSubmitted", "CaseClosed", "CaseReturned"])
        trig = triggers.registry(["CaseOpened", "CaseSubmitted", "CaseClosed", "CaseReturned"])
        for event_type in ("CaseOpened", "CaseClosed"):
            (h,) = proj.handlers_for(event_type, ProcessingMode.REPLAY)
            assert h.kind is HandlerKind.PROJECTION and h.batch
        assert trig.handlers_for("CaseClosed", ProcessingMode.REPLAY) == ()
        (h,) = trig.handlers_for("CaseClosed", ProcessingMode.LIVE)
        assert h.kind is HandlerKind.PROCESS
        assert trig.knows("CaseOpened") and not trig.handlers_for("CaseOpened", ProcessingMode.LIVE)

    def test_fold_keeps_the_last_state_per_case(self) -> None:
        events = [case_event("CaseOpened", 1, title="A"), case_event("CaseSubmitted", 2),
                  case_event("CaseOpened", 1, case_id="c2", title="B"),
                  case_event("CaseClosed", 3, outcome="no_violation")]
        views = {v.case_id: v for v in projection.fold(events)}
        assert (views["c1"].state, views["c1"].aggregate_version, views["c1"].title) == (
            "closed", 3, "A")
        assert (views["c2"].state, views["c2"].title) == ("open", "B")

    def test_the_service_declares_both_consumers(self) -> None:
        assert set(SERVICE.consumers) == {projection.CONSUMER, triggers.CONSUMER}
        assert projection.PROJECTION.live_consumer == projection.CONSUMER


class TestHttp:
    @pytest.fixture
    def client(self, repo: MemoryWatchRepository) -> TestClient:
        edge = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
        return TestClient(build_app(repo, FixedClock(T0), edge=edge))

    def test_put_then_get(self, client: TestClient, repo: MemoryWatchRepository) -> None:
        h = bearer_headers("tenant-a", subject="officer-1")
        put = client.put("/watch/cases/c1", headers=h)
        assert put.status_code == 201
        assert put.json() == {"watch_id": "c1/officer-1", "case_id": "c1",
                              "watcher_id": "officer-1", "version": 0,
                              "created_at": T0.isoformat()}
        assert client.put("/watch/cases/c1", headers=h).status_code == 200
        got = client.get("/watch/cases/c1", headers=h)
        assert got.status_code == 200
        assert got.json() == {"case_id": "c1", "case": None, "watchers": ["officer-1"]}
        repo.cases["c1"] = CaseView(case_id="c1", tenant_id="tenant-a", state="closed",
                                    title="Leak", aggregate_version=4, updated_at=T0)
        assert client.get("/watch/cases/c1", headers=h).json()["case"] == {
            "state": "closed", "title": "Leak", "aggregate_version": 4,
            "updated_at": T0.isoformat()}

    def test_unknown_and_foreign_cases_are_404(self, client: TestClient) -> None:
        client.put("/watch/cases/c1", headers=bearer_headers("tenant-b", subject="x"))
        got = client.get("/watch/cases/c1", headers=bearer_headers("tenant-a"))
        assert got.status_code == 404 and got.json()["code"] == "case_not_found"

    def test_the_edge_answers_first(self, client: TestClient) -> None:
        assert client.get("/watch/cases/c1").status_code == 401
        assert client.put("/watch/cases/c1").status_code == 401

    def test_a_retry_with_the_idempotency_key_gets_the_first_answer(
            self, client: TestClient, repo: MemoryWatchRepository) -> None:
        h = {**bearer_headers("tenant-a", subject="officer-1"), "Idempotency-Key": "w-1"}
        first = client.put("/watch/cases/c1", headers=h)
        again = client.put("/watch/cases/c1", headers=h)
        assert first.status_code == again.status_code == 201  # not 200 "already watching"
        assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
        other_case = client.put("/watch/cases/c2", headers=h)
        assert other_case.status_code == 409 and other_case.json()["code"] == "idempotency_conflict"
        assert list(repo.watches) == [("tenant-a", "c1", "officer-1")]
        counters = client.app.state.counters  # type: ignore[attr-defined]
        assert (counters.idempotency_replays, counters.idempotency_conflicts) == (1, 1)
        assert len(repo.keys.records) == 1

    def test_a_malformed_idempotency_key_is_a_400_naming_the_header(self, client: TestClient) -> None:
        bad = client.put("/watch/cases/c1", headers={**bearer_headers("tenant-a"),
                                                     "Idempotency-Key": " padded "})
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "Idempotency-Key"
