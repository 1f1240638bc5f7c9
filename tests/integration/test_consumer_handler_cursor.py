"""``HandlerContext.cursor`` against the real PostgreSQL and Kafka: handlers sharing one cursor
read their own statements' results, in pipeline mode (also behind unread results of earlier
statements) and without, and the shared cursor survives a batch redone message by message."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from casestream.handlers.cursors import PipelineReadCursor, SharedCursor
from casestream.handlers.registry import HandlerContext, HandlerKind, HandlerRegistry
from casestream.errors import RetryableError
from casestream.testing.consumer import (
    Harness,
    create_topic,
    database_dsn,
    produce_events,
    wait_until,
)
from tests.support.events import case_returned


def _deliver_unread_results(conn: Any) -> None:
    """In pipeline mode: have the server send the results of the statements sent so far and
    leave them unread in the socket until the next statement (what a full server output
    buffer does by chance, ~8 KB of results)."""
    if conn.pgconn.pipeline_status:
        conn.pgconn.send_flush_request()
        conn.pgconn.flush()
        time.sleep(0.02)


def test_a_read_behind_unread_results_gets_its_own_result(pg_url: str) -> None:
    dsn = database_dsn(pg_url)

    def select_after_unread_inserts(cur: Any) -> Any:
        with conn.pipeline(), conn.transaction():
            for i in range(3):
                cur.execute("INSERT INTO handler_cursor_probe VALUES (%s)", (i,))  # not read
            _deliver_unread_results(conn)
            cur.execute("SELECT 42")
            return cur.fetchone()

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE handler_cursor_probe (i int)")
        shared = SharedCursor()(conn)
        assert isinstance(shared, PipelineReadCursor)
        assert [select_after_unread_inserts(shared) for _ in range(5)] == [(42,)] * 5
        # the scenario is real: psycopg's own cursor returns an INSERT's result here
        with pytest.raises(psycopg.ProgrammingError, match="didn't produce records"):
            select_after_unread_inserts(conn.cursor())


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipeline", "no-pipeline"])
def test_handlers_on_the_shared_cursor_read_their_own_writes(consumer_harness: Any,
                                                             pipeline: bool) -> None:
    env: Harness = consumer_harness()
    table = env.projection.table
    first = [case_returned(f"A{a}", v) for v in range(1, 4) for a in range(4)]
    then = [case_returned(f"A{a}", v) for v in range(4, 7) for a in range(4)]
    fail_once = {then[5].event_id}  # its batch fails once: redone with a savepoint per message
    counted: dict[str, int] = {}
    cursors: dict[int, set[int]] = defaultdict(set)  # connection -> cursors the handlers got

    registry = HandlerRegistry()

    @registry.on("CaseReturned", kind=HandlerKind.PROJECTION)
    def insert(ctx: HandlerContext, e: Any) -> None:
        ctx.cursor.execute(  # not read: in pipeline mode its result stays outstanding
            f"INSERT INTO {table} (event_id, aggregate_id, aggregate_version) VALUES (%s, %s, %s)",
            (e.event_id, e.aggregate_id, e.aggregate_version))
        if e.event_id in fail_once:
            fail_once.discard(e.event_id)
            raise RetryableError("induced failure after the insert")

    @registry.on("CaseReturned", kind=HandlerKind.PROJECTION)
    def count(ctx: HandlerContext, e: Any) -> None:
        cur = ctx.cursor
        cursors[id(ctx.conn)].add(id(cur))
        _deliver_unread_results(ctx.conn)
        cur.execute(f"SELECT count(*) FROM {table} WHERE aggregate_id = %s", (e.aggregate_id,))
        counted[e.event_id] = cur.fetchone()[0]

    create_topic(env.bootstrap, env.topic, 1)
    rt = env.start(env.runtime(env.settings(pipeline_handlers=pipeline), registry))
    produce_events(env.bootstrap, env.topic, env.codec, first)
    wait_until(lambda: rt.stats.applied >= len(first))
    assert rt.stats.fast_batches == rt.stats.batches > 0  # handlers ran on the fast path
    produce_events(env.bootstrap, env.topic, env.codec, then)
    wait_until(lambda: rt.stats.applied >= len(first) + len(then))
    env.stop(rt)

    events = first + then
    assert not fail_once  # the induced failure happened
    assert rt.stats.fast_batches < rt.stats.batches  # ... and its batch was redone
    env.one_effect_each(e.event_id for e in events)
    # each count ran after its own insert, on the same cursor, and saw exactly the rows up to it
    assert {e.event_id: counted[e.event_id] for e in events} == {
        e.event_id: e.aggregate_version for e in events}
    assert cursors and all(len(ids) == 1 for ids in cursors.values()), cursors
