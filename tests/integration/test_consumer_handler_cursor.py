"""``HandlerContext.cursor`` against the real PostgreSQL and Kafka: handlers sharing one cursor
see their own statements' results in order, in pipeline mode and without, and the shared
cursor survives a batch that fails and is redone message by message."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from casestream.consumer.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.errors import RetryableError
from casestream.testing.consumer import Harness, create_topic, make_event, produce_events, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipeline", "no-pipeline"])
def test_handlers_on_the_shared_cursor_read_their_own_writes(consumer_harness: Any,
                                                             pipeline: bool) -> None:
    env: Harness = consumer_harness()
    table = env.projection.table
    events = [make_event(f"A{a}", v) for v in range(1, 6) for a in range(4)]
    fail_once = {events[7].event_id}  # its batch fails once: redone with a savepoint per message
    counted: dict[str, int] = {}
    cursors: dict[int, set[int]] = defaultdict(set)  # connection -> cursors the handlers got

    registry = HandlerRegistry()

    @registry.on("CaseReturned", kind=HandlerKind.PROJECTION)
    def insert(ctx: HandlerContext, e: Any) -> None:
        ctx.cursor.execute(  # no fetch: in pipeline mode its result is still outstanding
            f"INSERT INTO {table} (event_id, aggregate_id, aggregate_version) VALUES (%s, %s, %s)",
            (e.event_id, e.aggregate_id, e.aggregate_version))
        if e.event_id in fail_once:
            fail_once.discard(e.event_id)
            raise RetryableError("induced failure after the insert")

    @registry.on("CaseReturned", kind=HandlerKind.PROJECTION)
    def count(ctx: HandlerContext, e: Any) -> None:
        cur = ctx.cursor
        cursors[id(ctx.conn)].add(id(cur))
        cur.execute(f"SELECT count(*) FROM {table} WHERE aggregate_id = %s", (e.aggregate_id,))
        counted[e.event_id] = cur.fetchone()[0]

    create_topic(env.bootstrap, env.topic, 1)
    produce_events(env.bootstrap, env.topic, env.codec, events)
    rt = env.start(env.runtime(env.settings(pipeline_handlers=pipeline), registry))
    wait_until(lambda: rt.stats.applied >= len(events))
    env.stop(rt)

    assert not fail_once  # the induced failure happened
    assert rt.stats.fast_batches < rt.stats.batches  # ... and a batch was redone
    env.one_effect_each(e.event_id for e in events)
    # each count ran after its own insert, on the same cursor, and saw exactly the rows up to it
    assert {e.event_id: counted[e.event_id] for e in events} == {
        e.event_id: e.aggregate_version for e in events}
    assert cursors and all(len(ids) == 1 for ids in cursors.values()), cursors
