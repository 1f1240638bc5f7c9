"""BatchProcessor against the real PostgreSQL (no Kafka): type policy, replay mode, first-seen
policy, batch handlers, fast-path fallback and attempt counting, held-event deduplication
and the drain of held events whichever batch fills their gap.

Records are built from events encoded by the real ``EnvelopeCodec``; dead letters go to an
in-memory sink so the assertions can look at them directly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from casestream.consumer import BatchProcessor, ConsumerSettings, Record
from casestream.retry import RetryPolicy
from casestream.testing.consumer import (
    EffectsProjection,
    database_dsn,
    headers_of,
    make_event,
)
from casestream.consumer.deadletters import MemoryDeadLetters
from casestream.errors import RetryableError
from casestream.handlers.guard import FirstSeenPolicy
from casestream.handlers.registry import HandlerContext, HandlerKind, HandlerRegistry
from casestream.consumer.inbox import ensure_schema
from casestream.handlers.processing import ProcessingMode
from tests.support.events import case_returned

SUBMITTED = {"title": "t", "severity": 3, "evidence_count": 1, "reporter_email": "r@example.org",
             "submitted_by": "officer-1"}


@pytest.fixture(scope="module")
def codec(registry_codec: Any) -> Any:
    """This module's codec is the real-registry one (tests/integration/conftest.py)."""
    return registry_codec


@pytest.fixture
def world(pg_url: str) -> Iterator[tuple[Any, EffectsProjection, str]]:
    dsn = database_dsn(pg_url)
    projection = EffectsProjection(f"effects_{uuid.uuid4().hex[:10]}")
    conn = psycopg.connect(dsn, autocommit=True)
    ensure_schema(conn)
    conn.execute(projection.ddl())
    name = f"test.batch-{uuid.uuid4().hex[:10]}"
    yield conn, projection, name
    conn.execute(f"DROP TABLE IF EXISTS {projection.table}")
    for table in ("consumer_inbox", "consumer_version_guard", "consumer_held_event",
                  "consumer_retry"):
        conn.execute(f"DELETE FROM {table} WHERE consumer LIKE %s", (name + "%",))
    conn.close()


def _records(codec: Any, events: Sequence[Any], partition: int = 0, start: int = 0) -> list[Record]:
    return [Record(topic="t", partition=partition, offset=start + i, key=e.aggregate_id.encode(),
                   value=codec.encode(e), headers=tuple(headers_of(e)), timestamp_ms=1_700_000_000_000)
            for i, e in enumerate(events)]


def _processor(name: str, registry: HandlerRegistry, codec: Any, **settings: Any) -> BatchProcessor:
    base: dict[str, Any] = dict(retry=RetryPolicy(max_attempts=3, initial_delay_s=0.01, max_delay_s=0.02))
    base.update(settings)
    return BatchProcessor(consumer=name, handlers=registry, decoder=codec,
                          dead_letters=MemoryDeadLetters(), settings=ConsumerSettings(**base))


def _guard(conn: Any, name: str, agg: str) -> tuple[str, int] | None:
    row = conn.execute("SELECT state, last_version FROM consumer_version_guard"
                       " WHERE consumer = %s AND aggregate_id = %s", (name, agg)).fetchone()
    return (row[0], row[1]) if row else None


def test_unknown_types_are_recorded_and_counted_or_dead_lettered_in_strict_mode(
        world: Any, codec: Any) -> None:
    conn, projection, name = world
    registry = projection.register(HandlerRegistry())
    evs = [case_returned("U", 1), make_event("U", 2, event_type="CaseSubmitted", payload=SUBMITTED),
           case_returned("U", 3)]
    lenient = _processor(name, registry, codec)
    result = lenient.process(conn, _records(codec, evs))
    assert result.fast and lenient.stats.unknown_type == 1 and lenient.stats.applied == 3
    assert [r[2] for r in projection.rows(conn)] == [1, 3]
    assert _guard(conn, name, "U") == ("flowing", 3)  # the unhandled v2 was recorded too

    strict = _processor(name + "-strict", registry, codec, strict_types=True)
    strict.process(conn, _records(codec, [make_event("S", 1, event_type="CaseSubmitted",
                                                     payload=SUBMITTED)]))
    [dl] = strict.dead_letters.sent  # type: ignore[attr-defined]
    assert dl.reason == "unknown_event_type" and dl.attempts == 1
    registry.ignore("CaseSubmitted")  # declared as deliberately unhandled: no longer a dead letter
    strict.process(conn, _records(codec, [make_event("S2", 1, event_type="CaseSubmitted",
                                                     payload=SUBMITTED)]))
    assert len(strict.dead_letters.sent) == 1 and strict.stats.applied == 1  # type: ignore[attr-defined]


def test_replay_runs_projections_only_and_discards_outbox_appends(world: Any, codec: Any) -> None:
    conn, projection, name = world
    calls: list[str] = []
    registry = projection.register(HandlerRegistry())

    @registry.on("CaseReturned", kind=HandlerKind.PROCESS)
    def process(ctx: HandlerContext, event: Any) -> None:
        calls.append("process")
        ctx.outbox.append(ctx.conn, [event])

    @registry.on("CaseReturned", kind=HandlerKind.SIDE_EFFECT)
    def side_effect(ctx: HandlerContext, event: Any) -> None:
        calls.append("side_effect")

    replay = _processor(name, registry, codec, mode=ProcessingMode.REPLAY)
    replay.process(conn, _records(codec, [case_returned("R", 1), case_returned("R", 2)]))
    assert calls == [] and len(projection.rows(conn)) == 2
    assert replay.stats.fast_batches == 1  # no side effect runs in replay: fast path allowed

    class Outbox:
        appended = 0

        def append(self, conn: Any, events: Sequence[Any]) -> None:
            Outbox.appended += len(events)

    live = BatchProcessor(consumer=name + "-live", handlers=registry, decoder=codec,
                          dead_letters=MemoryDeadLetters(), outbox=Outbox(),
                          settings=ConsumerSettings(mode=ProcessingMode.LIVE))
    live.process(conn, _records(codec, [case_returned("L", 1)]))
    assert calls == ["process", "side_effect"] and Outbox.appended == 1
    assert live.stats.fast_batches == 0  # a SIDE_EFFECT handler: one savepoint per message


def test_first_seen_policy_strict_holds_baseline_applies(world: Any, codec: Any) -> None:
    conn, projection, name = world
    registry = projection.register(HandlerRegistry())
    strict = _processor(name, registry, codec)
    strict.process(conn, _records(codec, [case_returned("F", 5)]))
    assert strict.stats.held == 1 and projection.rows(conn) == []
    assert _guard(conn, name, "F") == ("holding", 0)
    baseline = _processor(name + "-b", registry, codec, first_seen=FirstSeenPolicy.BASELINE)
    baseline.process(conn, _records(codec, [case_returned("F", 5), case_returned("F", 7)]))
    assert [r[2] for r in projection.rows(conn)] == [5]  # v5 sets the baseline; v7 is a gap
    assert _guard(conn, name + "-b", "F") == ("holding", 5)


def test_batch_handlers_get_runs_in_order_and_single_events_after_a_failure(
        world: Any, codec: Any) -> None:
    conn, projection, name = world
    calls: list[list[int]] = []
    fail_on: set[str] = set()
    registry = HandlerRegistry()

    @registry.on_batch("CaseReturned", kind=HandlerKind.PROJECTION)
    def project(ctx: HandlerContext, events: Sequence[Any]) -> None:
        calls.append([e.aggregate_version for e in events])
        assert len(ctx.positions) == len(events)
        for e in events:
            if e.event_id in fail_on:
                raise RetryableError("induced")
        with ctx.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {projection.table} (event_id, aggregate_id,"
                            " aggregate_version) VALUES (%s, %s, %s)",
                            [(e.event_id, e.aggregate_id, e.aggregate_version) for e in events])

    evs = [case_returned("B", v) for v in (1, 2, 3)]
    bp = _processor(name, registry, codec)
    assert bp.process(conn, _records(codec, evs)).fast
    assert calls == [[1, 2, 3]]

    calls.clear()
    more = [case_returned("B", v) for v in (4, 5, 6)]
    fail_on.add(more[1].event_id)
    result = bp.process(conn, _records(codec, more, start=3))
    assert not result.fast
    assert calls == [[4, 5, 6], [4], [5]]  # fast try, then one by one up to the failure
    assert result.commits == {("t", 0): 4} and result.rewinds[("t", 0)][0] == 4
    assert [r[2] for r in projection.rows(conn)] == [1, 2, 3, 4]


def test_fast_path_handler_failure_is_that_messages_attempt(world: Any, codec: Any) -> None:
    conn, projection, name = world
    registry = projection.register(HandlerRegistry())
    ok, bad = case_returned("A", 1), case_returned("A", 2)
    projection.fail[bad.event_id] = 10
    backoff = RetryPolicy(max_attempts=3, initial_delay_s=0.5, max_delay_s=0.5, jitter=0.0)
    bp = _processor(name, registry, codec, retry=backoff)
    records = _records(codec, [ok, bad])
    for attempt in (1, 2, 3):
        if attempt > 1:  # too early: the owed backoff cuts the partition without an attempt
            early = bp.process(conn, records[1:])
            assert projection.calls[bad.event_id] == attempt - 1
            assert early.rewinds[("t", 0)][0] == 1 and early.rewinds[("t", 0)][1] > 0
            time.sleep(0.55)  # the backoff (0.5 s, no jitter) is over
        result = bp.process(conn, records if attempt == 1 else records[1:])
        assert projection.calls[bad.event_id] == attempt  # one handler call per attempt
    assert result.commits == {("t", 0): 2} and not result.rewinds  # dead-lettered on attempt 3
    [dl] = bp.dead_letters.sent  # type: ignore[attr-defined]
    assert dl.attempts == 3 and dl.reason == "retries_exhausted"
    assert _guard(conn, name, "A") == ("flowing", 1)  # the dead letter left a gap


def test_fast_path_without_pipeline_and_held_events_deduplicated(world: Any, codec: Any) -> None:
    conn, projection, name = world
    registry = projection.register(HandlerRegistry())
    bp = _processor(name, registry, codec, pipeline_handlers=False)
    assert bp.process(conn, _records(codec, [case_returned("N", 1), case_returned("N", 2)])).fast
    gap = case_returned("N", 4)
    bp.process(conn, _records(codec, [gap, gap]))  # delivered twice while held
    assert bp.stats.held == 1
    assert conn.execute("SELECT count(*) FROM consumer_held_event WHERE consumer = %s",
                        (name,)).fetchone()[0] == 1
    bp.process(conn, _records(codec, [case_returned("N", 3)]))
    assert [r[2] for r in projection.rows(conn)] == [1, 2, 3, 4]
    assert _guard(conn, name, "N") == ("flowing", 4) and bp.stats.drained == 1


def test_a_stale_guard_cache_never_causes_a_wrong_effect(world: Any, codec: Any) -> None:
    conn, projection, name = world
    registry = projection.register(HandlerRegistry())
    one, two = _processor(name, registry, codec), _processor(name, registry, codec)
    e = [case_returned("C", v) for v in range(1, 6)]
    assert one.process(conn, _records(codec, e[:3])).fast  # one caches C at v3
    assert two.process(conn, _records(codec, [e[3]])).fast  # another instance records v4
    copy4 = case_returned("C", 4)  # a second event claiming version 4 (stale by now)
    one.process(conn, _records(codec, [copy4]))
    assert one.stats.stale == 1 and one.stats.applied == 3  # the conditional upsert caught it
    one.process(conn, _records(codec, [e[3], e[4]]))  # v4 again (duplicate) and v5
    assert one.stats.duplicates == 1 and one.stats.applied == 4
    assert [r[0] for r in projection.rows(conn)] == [x.event_id for x in e]
    assert _guard(conn, name, "C") == ("flowing", 5)


# A held event must be applied exactly once, in version order, whichever batch fills its gap.
# Each case: batches of (topic, version) for aggregate "H"; a version repeated is the same event
# delivered again; "redrive" is the consumer's re-drive topic.
HELD_CASES = {
    "filler_after_held_same_batch": [[("t", 1), ("t", 3), ("t", 2)]],
    "filler_from_redrive_after_held_same_batch": [[("t", 1), ("t", 3), ("redrive", 2)]],
    "filler_before_held_same_batch": [[("t", 1), ("t", 4)], [("t", 2), ("t", 3)]],
    "several_held_same_batch": [[("t", 1), ("t", 4), ("t", 3), ("t", 2)]],
    "held_before_and_now_then_filler": [[("t", 1), ("t", 4)], [("t", 3), ("t", 2)]],
    "held_redelivered_with_filler": [[("t", 1), ("t", 3)], [("t", 3), ("t", 2)]],
    "held_twice_in_batch_with_filler": [[("t", 1), ("t", 3), ("t", 3), ("t", 2), ("t", 3)]],
}


@pytest.mark.parametrize("batches", HELD_CASES.values(), ids=HELD_CASES.keys())
def test_held_events_apply_once_in_order_whichever_batch_fills_the_gap(
        world: Any, codec: Any, batches: list[list[tuple[str, int]]]) -> None:
    conn, projection, name = world
    bp = _processor(name, projection.register(HandlerRegistry()), codec)
    events: dict[int, Any] = {}
    offset = 0
    for batch in batches:
        records = []
        for topic, version in batch:
            e = events.setdefault(version, case_returned("H", version))
            [rec] = _records(codec, [e], start=offset)
            offset += 1
            records.append(Record(topic=f"{name}.redrive" if topic == "redrive" else topic,
                                  partition=0, offset=rec.offset, key=rec.key, value=rec.value,
                                  headers=rec.headers, timestamp_ms=rec.timestamp_ms))
        bp.process(conn, records)
    top = max(events)
    assert [(r[0], r[2]) for r in projection.rows(conn)] == [
        (events[v].event_id, v) for v in range(1, top + 1)]
    assert conn.execute("SELECT count(*) FROM consumer_held_event WHERE consumer = %s",
                        (name,)).fetchone()[0] == 0
    assert _guard(conn, name, "H") == ("flowing", top)
    assert bp.stats.applied == top and bp.stats.dead_lettered == 0
